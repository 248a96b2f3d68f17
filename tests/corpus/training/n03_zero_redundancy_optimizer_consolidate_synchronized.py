"""The fix twin of n02: torch's ZeroRedundancyOptimizer.consolidate_state_dict, then torch.cuda.synchronize() before
the consolidated state is read on the host.

EXPECTED: clean
REASON: synchronize() waits for every stream of the device (CUDA semantics), so the asynchronous D2H copies
into pinned memory that consolidate_state_dict issues (zero_redundancy_optimizer.py:48, .to("cpu",
non_blocking=True)) are complete before the host reads them; the consolidated state equals plain AdamW's.
"""
import os
import runpy

if __name__ == "__main__":
    runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "n02_zero_redundancy_optimizer_ddp.py"),
                   init_globals={"SYNCHRONIZE": True}, run_name="__main__")
