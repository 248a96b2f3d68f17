"""init_process_group(device_id=cuda:LOCAL_RANK) without set_device, and the tensors made with device="cuda": they
land on cuda:0 (the current device), and the group bound to cuda:LOCAL_RANK refuses the collective on every rank
but 0.

EXPECTED: error
ERROR: DistBackendError
MODELLED ON: scripts migrated to eager init (`init_process_group(backend, device_id=torch.device(f"cuda:{local_rank}"))`)
that dropped the `torch.cuda.set_device(local_rank)` line: the error users report as "Tensor found on device
cuda:0 but backend constrained to cuda:1" (e.g. FSDP state-dict staging tensors created on cuda:0).
REASON: torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp getNCCLComm / initNCCLComm: `if (bound_device_id_ &&
*bound_device_id_ != device)`: LOG(ERROR) "Tensor found on device ... but backend constrained to ..." and
C10_THROW_ERROR(DistBackendError, "Attempt to perform collective on tensor not on device passed to
init_process_group"); init_process_group binds the device but does not make it current.
"""
import os

import torch
import torch.distributed as dist


def main():
    lr = int(os.environ["LOCAL_RANK"])
    dist.init_process_group("nccl", device_id=torch.device("cuda", lr))
    loss = torch.tensor([1.5 * (dist.get_rank() + 1)], device="cuda")     # cuda:0
    dist.all_reduce(loss)
    print(loss.item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
