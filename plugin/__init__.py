"""The recoverable elastic plugin: preempted PyTorch elastic pods report a recoverable error.

Switch a task by changing one import::

    from plugin import Elastic          # was: from flytekitplugins.kfpytorch import Elastic

    @task(task_config=Elastic(nnodes=2, nproc_per_node=4), retries=3)
    def train(...): ...

For code bases that cannot change their imports, see `use_recoverable_for_upstream_elastic`.
"""

from flytekit.core.task import TaskPlugins
from flytekitplugins.kfpytorch.task import Elastic as UpstreamElastic
from flytekitplugins.kfpytorch.task import PytorchElasticFunctionTask

from plugin.task import Elastic, RecoverableElasticTask

TaskPlugins.register_pythontask_plugin(Elastic, RecoverableElasticTask)


def use_recoverable_for_upstream_elastic() -> None:
    """Opt in: tasks declared with the *upstream* `Elastic` also become `RecoverableElasticTask`.

    Call it once, before any task module is imported, in every process that declares tasks: where you
    register (e.g. your package's `__init__` or `conftest.py`) *and* in the pod (the same import runs
    there when pyflyte-execute loads the task module).

    Trade-off: flytekit's `TaskPlugins` has no public way to replace a registration, so this rewrites
    its registry entry for the upstream `Elastic` class. It is process-wide (every upstream `Elastic`
    task in the process changes, including ones in libraries you import), it only affects tasks
    declared *after* the call, and it relies on that registry's layout staying as it is in flytekit
    1.16. Prefer `from plugin import Elastic` where you can change the import.
    """
    TaskPlugins._PYTHONFUNCTION_TASK_PLUGINS[UpstreamElastic] = RecoverableElasticTask


def restore_upstream_elastic() -> None:
    """Undo `use_recoverable_for_upstream_elastic` (tasks declared afterwards are upstream again)."""
    TaskPlugins._PYTHONFUNCTION_TASK_PLUGINS[UpstreamElastic] = PytorchElasticFunctionTask


__all__ = [
    "Elastic",
    "RecoverableElasticTask",
    "use_recoverable_for_upstream_elastic",
    "restore_upstream_elastic",
]
