"""A real local PyTorchJob: real `pyflyte-execute` pods driven by the model's kubelet, operator and propeller.

Needs the plugin extra (flytekit, torch). `run_local(spec, work_dir)` returns the same `Execution` record
the simulator does, so the two can be compared field by field (`aggregation.record.compare`).
"""
