import os

import torch

if os.environ.get("PYTEST_XDIST_WORKER"):
    # one intra-op thread per xdist worker: the simulated ops are small, oversubscribing 2 cores only hurts
    torch.set_num_threads(1)
