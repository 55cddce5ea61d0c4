import os
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# The CLI caches compiled JAX code; the suite uses a cache of its own, never the user's.
os.environ.setdefault("SHOAL_COMPILATION_CACHE", tempfile.mkdtemp(prefix="shoal-test-jax-cache-"))
