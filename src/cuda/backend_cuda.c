/* The cuda compute table: the entries of src/cuda/ (ops.h, attention.h)
 * behind src/tensor/backend.h's interface.  dt__cuda_init (cuda.h) must
 * have selected the GPU before the first entry runs. */
#include "cuda/attention.h"
#include "cuda/ops.h"
#include "tensor/backend.h"

static const dt_compute_ops cuda_ops = {
    .name = "cuda",
    .host = false,

    .alloc = dt__cuda_alloc,
    .free = dt__cuda_free,
    .upload = dt__cuda_upload,
    .download = dt__cuda_download,
    .copy = dt__cuda_copy,
    .zero = dt__cuda_zero,
    .sync = dt__cuda_sync,
    .mem_info = dt__cuda_mem_info,
    .mem_peak = dt__cuda_mem_peak,
    .stream_create = dt__cuda_stream_create,
    .stream_destroy = dt__cuda_stream_destroy,
    .event_create = dt__cuda_event_create,
    .event_destroy = dt__cuda_event_destroy,
    .upload_async = dt__cuda_upload_async,
    .event_record = dt__cuda_event_record,
    .stream_wait_event = dt__cuda_stream_wait_event,
    .event_sync = dt__cuda_event_sync,
    .host_alloc = dt__cuda_host_alloc,
    .host_free = dt__cuda_host_free,

    .gemm = dt__cuda_gemm,
    .linear_grads = dt__cuda_linear_grads,

    .axpy = dt__cuda_axpy,
    .add = dt__cuda_add,
    .mul = dt__cuda_mul,
    .scale = dt__cuda_scale,
    .sumsq = dt__cuda_sumsq,

    .rows_fill = dt__cuda_rows_fill,
    .rows_sum_add = dt__cuda_rows_sum_add,
    .rows_add = dt__cuda_rows_add,
    .rows_gather = dt__cuda_rows_gather,
    .rows_scatter_add = dt__cuda_rows_scatter_add,

    .layernorm_fwd = dt__cuda_layernorm_fwd,
    .layernorm_bwd = dt__cuda_layernorm_bwd,
    .gelu_fwd = dt__cuda_gelu_fwd,
    .gelu_bwd = dt__cuda_gelu_bwd,
    .gelu_fwd_bf16 = dt__cuda_gelu_fwd_bf16,
    .gelu_bwd_bf16 = dt__cuda_gelu_bwd_bf16,
    .relu_fwd = dt__cuda_relu_fwd,
    .relu_bwd = dt__cuda_relu_bwd,
    .dropout_fwd = dt__cuda_dropout_fwd,

    .attn_saved_floats = dt__cuda_attn_saved_floats,
    .attn_scratch_floats = dt__cuda_attn_scratch_floats,
    .attn_fwd = dt__cuda_attn_fwd,
    .attn_bwd = dt__cuda_attn_bwd,

    .xent = dt__cuda_xent,

    .adamw = dt__cuda_adamw,
    .sgd = dt__cuda_sgd,
};

const dt_compute_ops *dt__cuda_ops(void) { return &cuda_ops; }
