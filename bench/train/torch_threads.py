"""Hold PyTorch to N threads for real; import and call before `import torch`.

torch.set_num_threads does not reach the OpenMP pool of Debian's OpenBLAS,
which otherwise takes every core: "N threads" must mean N for both systems.
"""
import os


def hold(threads):
    os.environ["OMP_NUM_THREADS"] = os.environ["OPENBLAS_NUM_THREADS"] = str(threads)
