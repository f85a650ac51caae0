"""Shared test configuration: Hypothesis profiles, and the checkout on the path."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from hypothesis import HealthCheck, Phase, settings

# specs/, conformance/ and bench/ are not shipped; append (not prepend) the checkout so that
# ``import verified_queue`` still finds the installed build under test.
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))

# ci: the same examples on every run, no example database left behind.
settings.register_profile(
    "ci",
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
# mutation: ci's examples, found failures not shrunk. A mutant stops at its first failing
# test, and no one reads the failure: shrinking it cost seconds per mutant a machine kills.
settings.register_profile(
    "mutation",
    parent=settings.get_profile("ci"),
    phases=(Phase.explicit, Phase.reuse, Phase.generate),
)
settings.register_profile("dev", max_examples=100, deadline=None)
# thorough: for long local runs before a release.
settings.register_profile(
    "thorough",
    max_examples=5_000,
    deadline=None,
    stateful_step_count=100,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev")
)
