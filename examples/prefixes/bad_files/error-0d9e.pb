
1
USER:Recoverable	preempted 2train-worker-1