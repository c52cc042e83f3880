"""The watchdog's settings, from the rank's environment (a site profile's ``[environment]``
or ``submit --env`` sets them).

>>> read({})
Settings(stall_timeout=600.0, action='abort', start_timeout=600.0, silent_timeout=30.0)
>>> read({"CHAINERMN_RT_STALL_TIMEOUT": "0", "CHAINERMN_RT_STALL_ACTION": "warn"}).stall_timeout
0.0
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from chainermn_rt.rank_contract import (
    SILENT_TIMEOUT_VAR,
    STALL_ACTION_VAR,
    STALL_TIMEOUT_VAR,
    START_TIMEOUT_VAR,
    setting,
)

DEFAULT_SECONDS = 600.0


@dataclass(frozen=True)
class Settings:
    stall_timeout: float  # seconds a collective may wait for a rank; 0: no watchdog
    action: str           # "abort" the job or only "warn", once per stalled collective
    start_timeout: float  # seconds MPI's start-up may take once begun; 0: no limit
    silent_timeout: float = 30.0  # seconds a rank may send nothing while others wait; 0: as
    #                              stall_timeout (a silent rank is dead, wedged or lost)


def read(environ: Mapping[str, str] | None = None) -> Settings:
    environ = os.environ if environ is None else environ
    return Settings(setting(environ, STALL_TIMEOUT_VAR, DEFAULT_SECONDS),
                    setting(environ, STALL_ACTION_VAR, "abort"),
                    setting(environ, START_TIMEOUT_VAR, DEFAULT_SECONDS),
                    setting(environ, SILENT_TIMEOUT_VAR, 30.0))
