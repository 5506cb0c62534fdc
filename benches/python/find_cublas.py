"""Print the folder of a cuBLAS library (libcublas.so*) this machine has, for LD_LIBRARY_PATH.

Looked for in CUDA_PATH's and the usual CUDA toolkit folders, then in the `nvidia` packages
PyTorch's CUDA wheels install beside it. Exits 1, printing nothing, when there is none.

    python3 benches/python/find_cublas.py
"""

import glob
import os
import site
import sys


def candidates():
    """Folders where a cuBLAS library may be, most likely first."""
    cuda = os.environ.get("CUDA_PATH")
    if cuda:
        yield os.path.join(cuda, "lib64")
    yield "/usr/local/cuda/lib64"
    yield "/usr/local/cuda/targets/x86_64-linux/lib"
    roots = list(site.getsitepackages())
    try:
        roots.append(site.getusersitepackages())
    except AttributeError:
        pass
    for root in roots:
        yield from sorted(glob.glob(os.path.join(root, "nvidia", "*", "lib")))
        yield from sorted(glob.glob(os.path.join(root, "nvidia", "cu*", "lib")))


def main():
    for folder in candidates():
        if glob.glob(os.path.join(folder, "libcublas.so*")):
            print(folder)
            return 0
    print("find_cublas: no libcublas.so* in the toolkit's or PyTorch's folders", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
