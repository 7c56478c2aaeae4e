"""What each kfpytorch elastic plugin variant does inside a pod: one object per variant.

The simulated pod asks its variant these questions; everything else a pod does is the same for all:
- does the plugin survive a SIGTERM during the first rendezvous (before torch installs its handlers)?
- what stamp does a worker failure carry (torch's `int(time.time())`, or a refined sub-second one)?
- what does the plugin make of torch's `SignalException`: nothing (`IgnoreOutputs`) or a recoverable
  error, stamped when?
- does a consequence (its own signal, a failure caused by a peer's death) yield to a sibling's report, and
  is a collateral failure reported recoverable?

Sources: flytekitplugins-kfpytorch 1.16 `task.py` `_execute` (upstream), torch elastic
`errors/error_handler.py` (whole-second stamps), this project's `plugin/task.py` (recoverable).
"""

from __future__ import annotations

from typing import Optional

from aggregation import defaults
from aggregation.kinds import PluginVariant
from aggregation.nanoseconds import on_the_clock
from aggregation.symbolic import whole_second


class PodPlugin:
    variant: PluginVariant
    #: a SIGTERM before torch's first `PContext.start` ends as a handled SignalException, not exit 143
    handles_first_rendezvous_signal = False
    #: a consequence (own signal, collateral failure) is not reported when a sibling's error file exists
    yields_to_siblings = False
    #: a worker failure caused by a peer's death is reported RECOVERABLE, stamped when it is reported
    collateral_recoverable = False
    #: how long a collateral report waits (looking every `sibling_poll`) for a sibling's report first
    sibling_wait = 0.0
    sibling_poll = defaults.SIBLING_POLL_SECONDS
    #: its `_execute` puts back the signal dispositions it found as it returns, so torch's SIGTERM handler does not
    #: outlive the agent (else it stays until the interpreter finalizes: `TORCH_HANDLER_AFTER_ENTRYPOINT_SECONDS`)
    restores_signal_dispositions = False

    def worker_failure_stamp(self, failed_at: float, file_time_lag: float) -> float:
        """torch stamps a worker failure with `int(time.time())`: the whole second of the reading's float."""
        return whole_second(failed_at)

    def signal_report(self, arrived: float, caught: float) -> Optional[float]:
        """The stamp of the recoverable error reported for a signal, or None for `IgnoreOutputs`."""
        raise NotImplementedError


class UpstreamPlugin(PodPlugin):
    """flytekitplugins-kfpytorch 1.16: SignalException -> IgnoreOutputs (no file, exit 0)."""

    variant = PluginVariant.UPSTREAM

    def signal_report(self, arrived: float, caught: float) -> Optional[float]:
        return None


class SeedPrPlugin(PodPlugin):
    """The first proposed fix: a recoverable error stamped where the exception is caught (after shutdown)."""

    variant = PluginVariant.SEED_PR

    def signal_report(self, arrived: float, caught: float) -> Optional[float]:
        return caught


class RecoverablePlugin(PodPlugin):
    """This project's plugin (`plugin/task.py`): a signal is reported recoverable, stamped at its arrival;
    sub-second worker stamps; the first rendezvous handled; consequences (its own signal, a worker failure
    caused by a peer's death) yield to a sibling's report, and a collateral failure is reported RECOVERABLE
    only after waiting for one."""

    variant = PluginVariant.RECOVERABLE
    handles_first_rendezvous_signal = True
    yields_to_siblings = True
    collateral_recoverable = True
    sibling_wait = defaults.SIBLING_WAIT_SECONDS
    restores_signal_dispositions = True  # `rendezvous_window_handlers` restores the default on the way out

    def worker_failure_stamp(self, failed_at: float, file_time_lag: float) -> float:
        """`plugin/task.py` `refine_first_failure_timestamp`: the worker's error file's mtime (the reading less the
        kernel's coarse-clock lag; less than 0 where the write's clock read comes after torch's) where it lies in
        torch's whole second or up to `FILE_TIME_GRAIN_SECONDS` before it, else torch's second. Both sides are read
        on the nanosecond, as every reading is, so a float's rounding decides nothing. No lag is no case of its own
        (the mtime is then the reading, always within torch's second): asking would split a proof at lag = 0."""
        mtime = on_the_clock(failed_at - file_time_lag)
        second = whole_second(failed_at)
        trusted = on_the_clock(second - defaults.FILE_TIME_GRAIN_SECONDS) <= mtime < second + 1
        return mtime if trusted else second

    def signal_report(self, arrived: float, caught: float) -> Optional[float]:
        return arrived


PLUGINS: dict[PluginVariant, PodPlugin] = {
    p.variant: p for p in (UpstreamPlugin(), SeedPrPlugin(), RecoverablePlugin())
}


def plugin_for(variant: PluginVariant) -> PodPlugin:
    return PLUGINS[variant]
