"""Suite-wide settings.

Hypothesis's per-example deadline is a timed assertion: on a busy 2-core machine (CI, or engineers
sharing one) a slow example fails a correct codec. Speed belongs to bench/, so no deadline here.
"""

from hypothesis import settings

settings.register_profile("lakelog", deadline=None)
settings.load_profile("lakelog")
