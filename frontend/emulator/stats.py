"""What one launch executed: instruction counts by class, bytes by memory space."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np


@dataclass
class LaunchStats:
    kernel: str = ""
    arch: str = ""
    instructions: Counter = field(default_factory=Counter)    # class -> wave-instructions
    mnemonics: Counter = field(default_factory=Counter)       # mnemonic -> wave-instructions
    bytes_loaded: Counter = field(default_factory=Counter)    # "global" | "lds" | "scalar" -> bytes
    bytes_stored: Counter = field(default_factory=Counter)
    workgroups: int = 0
    waves: int = 0
    barriers: int = 0
    seconds: float = 0.0
    # (code addresses, wave-instructions at each): the profile `by_address` reads, kept as two arrays
    # (a device keeps its last 64 launches; as a Counter the profile was hundreds of KB a launch)
    profile: tuple[np.ndarray, np.ndarray] | None = field(default=None, repr=False)

    @property
    def by_address(self) -> Counter:
        """Code address -> wave-instructions executed there (a profile of the launch)."""
        if self.profile is None:
            return Counter()
        addrs, counts = self.profile
        return Counter(dict(zip(addrs.tolist(), counts.tolist(), strict=True)))

    @property
    def total_instructions(self) -> int:
        return sum(self.instructions.values())

    @property
    def rate(self) -> float:
        """Wave-instructions executed per second of host time."""
        return self.total_instructions / self.seconds if self.seconds > 0 else 0.0

    def __str__(self) -> str:
        cls = ", ".join(f"{k} {v}" for k, v in sorted(self.instructions.items()))
        ld = ", ".join(f"{k} {v}" for k, v in sorted(self.bytes_loaded.items()))
        st = ", ".join(f"{k} {v}" for k, v in sorted(self.bytes_stored.items()))
        return (f"{self.kernel} on {self.arch}: {self.workgroups} workgroups, {self.waves} waves, "
                f"{self.total_instructions} wave-instructions ({cls}); loaded {ld or 0} B; stored {st or 0} B; "
                f"{self.barriers} barriers; {self.rate:,.0f} wave-instructions/s")
