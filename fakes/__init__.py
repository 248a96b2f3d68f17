"""Pure-PyTorch fakes of third-party CUDA libraries, usable on CPU, GPU and inside simdist."""
