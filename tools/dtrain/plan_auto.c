/* layout=auto: the plan made by rank 0 of a training job from this
 * machine's profile and the links it measured, its choice sent to every rank
 * before the strategy is built (docs/planner.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan_inputs.h"

/* Apply layout l's keys the plan chooses to c. */
static void apply_layout(dtrain_config *c, const dt_layout *l)
{
    c->tp = l->tp;
    c->pp = l->pp;
    c->zero_stage = l->zero_stage;
    c->micro_batches = l->micro_batches;
    c->virtual_stages = l->virtual_stages;
    c->sequence_parallel = l->sequence_parallel;
    c->tp_copies = l->tp_copies;
    snprintf(c->pipeline_schedule, sizeof c->pipeline_schedule, "%s", dt_pipe_schedule_name(l->schedule));
    snprintf(c->recompute, sizeof c->recompute, "%s",
             l->recompute == DT_RECOMPUTE_ALL ? "all" : l->recompute == DT_RECOMPUTE_BLOCKS ? "blocks" : "off");
}

/* Rank 0's choice: the first of the plan's best that this configuration
 * can run; false with the reason printed. */
static bool choose(const dtrain_config *c, const dt_plan_links *links, int world, dt_plan_estimate *out)
{
    dt_plan_inputs in = {.links = *links};
    double limit = 0;
    if (c->memory_limit[0])
        (void)dtrain_parse_bytes(c->memory_limit, &limit); /* validated with the configuration */
    else if ((limit = dtrain_cgroup_memory_limit()) > 0) /* as the trainer: shared by this host's ranks */
        /* the cgroup's limit is where the kernel kills: the plan keeps 30% of each share for what its model
         * does not count (code and libraries, shared-memory segments, the arenas' pages beyond the activations
         * it predicts: measured 178 MiB for a 146 MiB prediction, dtrun, files in tmpfs) */
        limit = limit / links->ranks_per_node * 0.7;
    int sharing = links->ranks_per_machine > links->ranks_per_node ? links->ranks_per_machine : links->ranks_per_node;
    if (dtrain_plan_profile(c, sharing, false, false, &in.model) != DT_OK)
        return false;
    dtrain_plan_share_cores(&in, false);
    dtrain_plan_inputs_of(c, world, limit, &in);
    dt_plan_result r = {0};
    dt_model_desc *d = NULL;
    bool found = false;
    if (dt_plan_search(&in, &(dt_plan_search_opts){.top = 16, .nodes = world / links->ranks_per_node,
                                                   .allow_recompute = true}, &r) != DT_OK)
        fprintf(stderr, "dtrain: layout auto: %s\n", dt_last_error());
    else if (dtrain_describe_model(c, NULL, &d) == DT_OK) {
        char why[512];
        for (int i = 0; i < r.nbest && !found; i++)
            if (r.best[i].layout.servers == 0 && dtrain_plan_runnable(c, &r.best[i].layout, world, d, why, sizeof why)) {
                *out = r.best[i];
                found = true;
            }
        if (!found)
            fprintf(stderr, "dtrain: layout auto: none of the plan's %d best layouts suits this configuration "
                            "(batch_size %lld, model %s)\n", r.nbest, (long long)c->batch_size, c->model);
    }
    dt_model_desc_destroy(d);
    dt_plan_result_free(&r);
    dt_plan_model_free(&in.model);
    return found;
}

int dtrain_plan_auto(dtrain_config *c, dt_comm *job, double *predicted)
{
    dt_plan_links links;
    int rank = dt_comm_rank(job), world = dt_comm_size(job);
    if (dt_plan_links_probe(job, &links) != DT_OK) {
        fprintf(stderr, "dtrain: rank %d: layout auto: %s\n", rank, dt_last_error());
        return 1;
    }
    /* rank 0 plans; every rank gets [its JSON's length (-1: no plan), the predicted step] then the JSON */
    dt_plan_estimate e;
    char *json = NULL;
    double head[2] = {-1, 0};
    if (rank == 0 && choose(c, &links, world, &e) && (json = dt_layout_to_json(&e.layout)))
        head[0] = (double)strlen(json) + 1, head[1] = e.step_s;
    if (dt_broadcast(head, 2, DT_F64, 0, job) != DT_OK) {
        fprintf(stderr, "dtrain: rank %d: layout auto: %s\n", rank, dt_last_error());
        free(json);
        return 1;
    }
    if (head[0] < 0) { /* rank 0 said why */
        free(json);
        return 2;
    }
    if (rank != 0 && !(json = calloc(1, (size_t)head[0]))) {
        fprintf(stderr, "dtrain: rank %d: layout auto: out of memory\n", rank);
        return 1;
    }
    dt_layout l;
    dt_layout_default(&l);
    if (dt_broadcast(json, (size_t)head[0], DT_U8, 0, job) != DT_OK || dt_layout_from_json(&l, json) != DT_OK) {
        fprintf(stderr, "dtrain: rank %d: layout auto: %s\n", rank, dt_last_error());
        free(json);
        return 1;
    }
    free(json);
    apply_layout(c, &l);
    *predicted = head[1];
    if (rank == 0) {
        char machine[96] = ""; /* namespace hosts of one machine: their ranks share its cores */
        if (links.ranks_per_machine > links.ranks_per_node)
            snprintf(machine, sizeof machine, ", %d sharing this machine's cores", links.ranks_per_machine);
        dtrain_progress_line("layout auto: links measured: one host %.1f us, %.2f GB/s; across hosts %.1f us, %.3f GB/s "
                             "per rank, %.2f ns of CPU per byte (%d rank%s per host%s)\n", links.intra.latency_s * 1e6,
                             links.intra.bandwidth_Bps / 1e9, links.inter.latency_s * 1e6,
                             links.inter.bandwidth_Bps / 1e9, links.inter_cpu_s_per_byte * 1e9, links.ranks_per_node,
                             links.ranks_per_node == 1 ? "" : "s", machine);
        char args[768], desc[256];
        dtrain_layout_args(&l, args, sizeof args);
        dt_layout_describe(&l, desc, sizeof desc);
        dtrain_progress_line("layout auto: %s (%s) for %d rank%s: predicted %.4f s/step (compute %.4f, bubble "
                             "%.4f, tp %.4f, pp %.4f, dp %.4f, optimizer %.4f), %.1f MiB per rank\n", desc,
                             args, world, world == 1 ? "" : "s", e.step_s,
                             e.compute_s, e.bubble_s, e.tp_s, e.pp_s, e.dp_s, e.optimizer_s, e.memory_bytes / 1048576);
    }
    return dtrain_config_validate(c) == DT_OK ? 0 : 2;
}
