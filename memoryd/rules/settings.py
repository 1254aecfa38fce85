"""What the rules domain needs of the daemon's settings: the composition root reads them and passes these."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RulesSettings:
    min_confidence: float  # compile policy: items below it are staged as candidates
    compile_max_observations: int
    compile_max_request_bytes: int
    observe_max_bytes: int
    rule_max_file_bytes: int
    watch: bool  # without a watcher, resolve looks at the rule files every time
