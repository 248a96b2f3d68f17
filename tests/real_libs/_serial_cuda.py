"""A serial CPU stand-in for the CUDA calls Megatron-Core hard-codes: test harness, not user code.

Megatron-Core 0.16.1 cannot run on a CPU build of torch even with the gloo backend: it allocates its buffers with
``device=torch.cuda.current_device()`` (distributed/param_and_grad_buffer.py:806, tensor_parallel/layers.py:873),
``device="cuda"`` (pipeline_parallel/schedules.py:596, optimizer/clip_grads.py:90), checks
``param.type() == 'torch.cuda.FloatTensor'`` (optimizer/distrib_optimizer.py:420) and seeds its RNG tracker with
``torch.cuda.get_rng_state()`` (tensor_parallel/random.py:235). The gloo tier of tests/test_real_libs.py runs the
Megatron scripts through this module so that their values can be checked on a CPU-only machine:

    torchrun --standalone --nproc-per-node=4 tests/real_libs/_launch.py --serial-cuda tests/real_libs/megatron_X.py

What it models is the simplest correct GPU: one device per process whose every kernel has finished when its launch
returns. All streams are that one serial queue, so every ``wait_stream`` / ``wait_event`` / ``Work.wait`` is already
satisfied; the values it gives are the values of any correctly synchronized schedule, which is what the references
check. It says nothing about races (that is simdist's job) and is never used by the simdist tier or by user code.

Scripts still see ``torch.cuda.is_available() == False``, so they choose the gloo backend and CPU tensors themselves;
only what Megatron asks of ``torch.cuda`` behind their back is answered here:
- ``torch.cuda.current_device()`` is 0 and every CUDA device argument (``"cuda"``, ``"cuda:0"``, ``0``,
  ``torch.device("cuda")``) of a torch function means the CPU; ``Tensor.cuda()`` returns the tensor;
- ``Tensor.type()`` names CPU tensors as their CUDA type (``torch.cuda.FloatTensor``), as on the GPU;
- streams and events are the serial queue (their waits and queries are trivially satisfied), ``synchronize`` and
  ``empty_cache`` return at once;
- the CUDA generator is a separate CPU ``torch.Generator`` (get/set_rng_state, manual_seed, default_generators).
"""

import contextlib

import torch
from torch.overrides import TorchFunctionMode


def _is_cuda_device(device):
    if isinstance(device, bool):
        return False
    if isinstance(device, int):  # a bare ordinal names a CUDA device
        return True
    if isinstance(device, str):
        return device.split(":")[0] == "cuda"
    if isinstance(device, torch.device):
        return device.type == "cuda"
    return False


class _CudaIsTheCpu(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func is torch.Tensor.cuda:
            return args[0]
        if func is torch.Tensor.type and len(args) == 1 and not kwargs:
            name = func(*args)
            return name if name.startswith("torch.cuda.") else name.replace("torch.", "torch.cuda.", 1)
        if _is_cuda_device(kwargs.get("device")):
            kwargs["device"] = "cpu"
        if func in (torch.Tensor.to, torch.Tensor.new_empty, torch.Tensor.new_zeros) and len(args) > 1:
            if _is_cuda_device(args[1]):
                args = (args[0], "cpu", *args[2:])
        return func(*args, **kwargs)


class _Event:
    def __init__(self, *args, **kwargs):
        pass

    def record(self, stream=None):
        pass

    def wait(self, stream=None):
        pass

    def synchronize(self):
        pass

    def query(self):
        return True

    def elapsed_time(self, other):
        return 0.0


class _Stream:
    def __init__(self, device=None, priority=0, **kwargs):
        pass

    def wait_stream(self, stream):
        pass

    def wait_event(self, event):
        pass

    def record_event(self, event=None):
        return event if event is not None else _Event()

    def synchronize(self):
        pass

    def query(self):
        return True

    def __eq__(self, other):
        return isinstance(other, _Stream)

    def __hash__(self):
        return 0


_THE_STREAM = _Stream()
_GENERATOR = torch.Generator()


def current_device():
    return 0


def device_count():
    return 1


def set_device(device):
    pass


def synchronize(device=None):
    pass


def empty_cache():
    pass


def current_stream(device=None):
    return _THE_STREAM


def default_stream(device=None):
    return _THE_STREAM


def stream(stream=None):
    return contextlib.nullcontext()


def get_rng_state(device="cuda"):
    return _GENERATOR.get_state()


def set_rng_state(new_state, device="cuda"):
    _GENERATOR.set_state(new_state)


def manual_seed(seed):
    _GENERATOR.manual_seed(seed)


def manual_seed_all(seed):
    _GENERATOR.manual_seed(seed)


def _lazy_call(callable, **kwargs):
    # torch.cuda._lazy_call queues callbacks until CUDA initializes, which never happens here: run them now
    callable()


def install():
    """Answers torch.cuda's device, stream, event and RNG calls for a CPU process; leaves is_available False."""
    assert not torch.cuda.is_available(), "the serial stand-in is for CPU-only machines"
    cuda = torch.cuda
    for fn in (current_device, device_count, set_device, synchronize, empty_cache, current_stream, default_stream,
               stream, get_rng_state, set_rng_state, manual_seed, manual_seed_all, _lazy_call):
        setattr(cuda, fn.__name__, fn)
    cuda.Stream = _Stream
    cuda.Event = _Event
    cuda.default_generators = (_GENERATOR,)
    cuda.random.get_rng_state = get_rng_state
    cuda.random.set_rng_state = set_rng_state
    _CudaIsTheCpu().__enter__()
