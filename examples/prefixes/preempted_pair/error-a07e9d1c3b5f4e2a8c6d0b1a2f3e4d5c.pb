
[
USER:RuntimeError&RuntimeError: Connection reset by peer *£ı³ØúĞúÄ2train-worker-0