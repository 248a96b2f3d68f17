"""Op rules for `_use_cudnn_ctc_loss` and `_use_miopen_ctc_loss`, the CUDA-only questions F.ctc_loss asks before it picks a kernel.

Rule (aten/src/ATen/native/cudnn/LossCTC.cpp `_use_cudnn_ctc_loss` / `_use_cudnn_ctc_loss_tensor`): cuDNN's CTC
kernel is taken when cuDNN is enabled, blank == 0, targets are 1-D, contiguous int32 (on the host for the
IntArrayRef overload), log_probs are 3-D float32 on the GPU (int32 length tensors for the Tensor overload), every
target length is below 256 and at most its input length (and, for the IntArrayRef overload, every input length is
log_probs.size(0)). A CPU build registers no kernel for the op, so under simdist every ctc_loss of a simulated
tensor died with NotImplementedError "Could not run 'aten::_use_cudnn_ctc_loss.Tensor' with arguments from the
'CPU' backend" (and then for _use_miopen_ctc_loss). Now: where the conditions on dtypes and layouts already rule cuDNN out (int64 targets, the common
case), the answer is False and ctc_loss runs ATen's native kernels, which simdist runs; where cuDNN's kernel could
be chosen it is refused by name (its values and gradients are cuDNN's, not modelled).
"""
from __future__ import annotations

import torch

from ...engine.errors import UnsupportedOperation
from ..op_rules import register

aten = torch.ops.aten


@register(aten._use_cudnn_ctc_loss.default, aten._use_cudnn_ctc_loss.Tensor)
def _use_cudnn_ctc_loss(me, func, args, kwargs):
    log_probs, targets, input_lengths, target_lengths = args[:4]
    blank = args[4] if len(args) > 4 else kwargs.get("blank", 0)
    tensor_form = func is aten._use_cudnn_ctc_loss.Tensor
    static = (torch.backends.cudnn.enabled and blank == 0 and targets.dim() == 1
              and log_probs.dtype == torch.float32 and targets.dtype == torch.int32 and targets.is_contiguous()
              and log_probs.dim() == 3 and log_probs.device.type == "cuda")
    if tensor_form:
        static = static and input_lengths.dtype == torch.int32 and target_lengths.dtype == torch.int32
    else:
        static = static and targets.device.type == "cpu"
        if static:
            T = log_probs.shape[0]
            static = (all(int(n) == T for n in input_lengths)
                      and all(int(t) < 256 and int(t) <= int(n) for t, n in zip(target_lengths, input_lengths)))
    if not static:
        return False
    raise UnsupportedOperation(
        "F.ctc_loss with int32 targets and float32 log_probs may take cuDNN's CTC kernel on a GPU "
        "(aten._use_cudnn_ctc_loss; cudnn/LossCTC.cpp), which simdist does not model: pass int64 targets, or set "
        "torch.backends.cudnn.enabled = False, to run ATen's native CTC kernels")


# ctc_loss then asks `_use_miopen_ctc_loss` (its targets moved to the host): on a CUDA build without ROCm the answer
# is False (miopen/LossCTC_miopen.cpp, !AT_ROCM_ENABLED()); the CPU build has no kernel for it either.
@register(aten._use_miopen_ctc_loss.default, aten._use_miopen_ctc_loss.Tensor)
def _use_miopen_ctc_loss(me, func, args, kwargs):
    return False
