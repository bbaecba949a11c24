"""cuda-arena for Python: ONNX Runtime's BFC arena and a CUDA memory-pool allocator, as
PyTorch's CUDA allocator (:mod:`cuda_arena.torch`), from the same ``libcuda_arena.so`` as the
npm package.

``import cuda_arena.torch; cuda_arena.torch.install()`` before the first CUDA tensor.
torch is imported lazily, so this package imports without it.
"""

from ._library import include_path, library_path
from ._replay import replay
from ._version import __version__
from .errors import ERROR_CODES, CudaArenaError

__all__ = [
    "CudaArenaError",
    "ERROR_CODES",
    "__version__",
    "include_path",
    "library_path",
    "replay",
]
