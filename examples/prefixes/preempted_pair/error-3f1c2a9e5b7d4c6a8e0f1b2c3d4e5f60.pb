
Œ
USER:RecoverableVThe elastic agent received SIGTERM; the worker group was terminated before it finished *£ı³ØìÒÊ¯2train-worker-1