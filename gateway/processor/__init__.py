"""Layer 3: the stream wiring between Kafka and the pure core."""

import contextlib
import warnings

# An optional dependency of the stream runtime warns about itself at import,
# after installing an "always" filter for its warnings; install ours after it.
with contextlib.suppress(ImportError):
    import authlib.deprecate  # noqa: F401
warnings.filterwarnings("ignore", module=r"authlib(\..*)?$")
