"""f10's training (real Megatron-Core 0.16.1, two distributed-optimizer instances, overlap_grad_reduce,
`check_for_nan_in_grad=True`) with a NaN in one input element of rank 2's last micro-batch at step 1. Megatron's
`check_grads` computes each bucket's local grad norm before the bucket's data-parallel collective and the rerun
state machine (RerunMode.DISABLED, the default) raises RuntimeError "found NaN in local grad norm for bucket #.. in
backward pass before data-parallel communication collective" on that rank, reading the norm on the host (a
synchronizing bool() of the CUDA tensor `torch.isnan(norm)`). The earlier step must train as the reference
(f10's assertions), and the error must be Megatron's, not a race or a crash inside simdist.

EXPECTED: error
ERROR: RuntimeError
WORLD_SIZE: 4
MODELLED ON: megatron/core/distributed/param_and_grad_buffer.py _ParamAndGradBucketGroup.check_grads and
megatron/core/rerun_state_machine.py RerunStateMachine.validate_result (`result_rejected = rejection_func(result)`;
`if fatal: raise RuntimeError(full_message)` in DISABLED mode), run unmodified.
REASON: the NaN reaches only rank 2's gradients before the collective; its norm is NaN, and the check runs in
the grad-ready hook of the bucket's last gradient, before start_grad_sync issues the reduce-scatter (on a GPU
the job then aborts; the other ranks' collectives would hang until the NCCL watchdog).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import f10_megatron_two_distopt_instances_comm_stream_nan_check as f10  # noqa: E402

if __name__ == "__main__":
    f10.main(nan_rank=2)
