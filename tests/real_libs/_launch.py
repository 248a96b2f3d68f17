"""Launcher of the gloo tier (tests/test_real_libs.py): runs a script of this folder as `__main__`, as
`torchrun ... SCRIPT.py` would, with two harness-side additions that the scripts themselves do not contain.

    torchrun --standalone --nproc-per-node=N tests/real_libs/_launch.py [--trace FILE] [--serial-cuda] SCRIPT.py ...

--serial-cuda  installs _serial_cuda.py's stand-in for the CUDA calls Megatron-Core hard-codes (CPU-only machine).
--trace FILE   records the torch APIs the libraries call (_api_trace.py) into FILE.rank<R>; for docs/dev/real-libs.md.

After the script returns, the launcher collects garbage before the interpreter finalizes. torch 2.13's
ProcessGroupGloo keeps its worker threads (`pt_gloo_runloop`) until the group object dies; DDP, FSDP2 and DeviceMesh
hold the group from inside reference cycles, so after `destroy_process_group()` the threads live on into
`Py_FinalizeEx`, where one that needs the GIL is made to exit and the process aborts ("terminate called without an
active exception", SIGABRT; gdb: a `pt_gloo_runloop` thread in `take_gil` during `Py_FinalizeEx`). Measured on this
machine with torch_ddp.py, fsdp2_fully_shard.py and dtensor_tp_plan.py: 10 of 38 runs aborted without the
collection, 0 of 26 with it. Collecting the cycles first lets the group's destructor join its threads while the
interpreter is whole.
"""

import gc
import os
import runpy
import sys


def main():
    args = sys.argv[1:]
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    tracer = trace_path = None
    if args[:1] == ["--trace"]:
        import _api_trace

        trace_path, args = os.path.abspath(args[1]), args[2:]
        tracer = _api_trace.Tracer()
    if args and args[0] == "--serial-cuda":
        args = args[1:]
        import _serial_cuda

        _serial_cuda.install()
    if not args:
        sys.exit("usage: _launch.py [--trace FILE] [--serial-cuda] SCRIPT.py [ARGS...]")
    script = os.path.abspath(args[0])
    sys.argv = args
    sys.path.insert(0, os.path.dirname(script))
    if tracer is not None:
        tracer.install()
    try:
        runpy.run_path(script, run_name="__main__")
    finally:
        if tracer is not None:
            tracer.dump(trace_path)
    gc.collect()


if __name__ == "__main__":
    main()
