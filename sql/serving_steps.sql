-- table: serving_steps
-- grain: one row per serving-engine step (a batch of co-scheduled requests) found in a trace
-- reads: stg_events, stg_meta_raw, trace_meta, int_meta_step_requests, kernel_taxbreak
-- description: Batch composition per engine step (METHOD.md section 8, LLMVisor), from where the trace carries it: the metadata's steps[].requests[] (per request: id, tenant, tokens, context), vLLM-style annotations execute_N_context_C(sq..sk..sqsq..sqsk..)_generation_G(sq..sk..sqsq..sqsk..) (per phase sums: requests, tokens, tokens squared, attended keys, no request ids), current vLLM's execute_context_C(tokens)_generation_G(tokens) (per phase: requests and scheduled tokens, one count per request or one sum; sum p^2 from the counts, or when the phase has one request or one token per request; no attended context, so not fit-ready), and SGLang's step[EXTEND bs=B toks=T] / step[DECODE bs=B] (requests and tokens only: no squared tokens, no context). When annotations overlap (SGLang traces carry both forms) the richest source gives the composition and the shortest overlapping range the timing (ours). Device time and orchestration come from the kernels the step's process launched (any process's when it launches none) whose launch call (their start when they have none) lies in the step. The per-step sums are what the fitted latency model (request_model_fit, docs/method.md) reads.
-- column: trace_id: trace key
-- column: step_id: 1-based position of the serving step in the trace by start time
-- column: step_name: annotation name that gave the composition
-- column: composition_source: 'sidecar' (metadata steps[].requests[]), 'vllm_execute' (execute_N_context_C(sq..)_generation_G(sq..)), 'vllm_execute_context' (execute_context_C(..)_generation_G(..)) or 'sglang_step'
-- column: has_request_detail: the composition lists the individual requests (only the metadata does); per-request shares need it
-- column: model_name: model from the metadata; 'unknown' when the trace has none
-- column: gpu_name: GPU model of the trace; 'cpu' for a CPU capture; 'unknown' when neither is known
-- column: phase: 'prefill' (only prompt work), 'decode' (only decode requests) or 'mixed' (both in one step, e.g. chunked prefill)
-- column: pid: host process of the annotation
-- column: step_ts_ns: step start: the start of the shortest overlapping step annotation (ns)
-- column: step_end_ns: end of that annotation (ns)
-- column: batch_requests: requests in the step, |B| (requests)
-- column: prefill_requests: requests doing prompt work in the step (requests)
-- column: decode_requests: requests decoding in the step (requests)
-- column: tokens_sum: tokens processed in the step, sum of p_i (tokens)
-- column: tokens_sq_sum: sum of p_i squared; NULL when the source does not give it (SGLang EXTEND) (tokens squared)
-- column: context_sum: attended context, sum of c_i (tokens already cached per request: vLLM sk - sq); NULL when the source does not give it (SGLang) (tokens)
-- column: prefill_tokens_sum: sum of p_i over the step's prefill requests (tokens)
-- column: prefill_tokens_sq_sum: sum of p_i squared over its prefill requests; NULL when the source does not give it (tokens squared)
-- column: prefill_context_sum: sum of c_i over its prefill requests; NULL when not given (tokens)
-- column: decode_tokens_sum: sum of p_i over the step's decode requests (tokens)
-- column: decode_tokens_sq_sum: sum of p_i squared over its decode requests; NULL when not given (tokens squared)
-- column: decode_context_sum: sum of c_i over its decode requests; NULL when not given (tokens)
-- column: kernels: kernels launched in the step (kernels)
-- column: device_active_ns: sum of those kernels' durations, T_DeviceActive of the step (ns)
-- column: t_orchestrate_ns: T_Orchestrate of those kernels: sum of delta_ft + delta_ct + delta_kt (METHOD.md section 2) (ns)
-- column: latency_ns: observed step latency: from step start to the later of the annotation end and the last kernel end (ours) (ns)
-- column: fit_ready: every per-phase sum the latency model needs is known and latency_ns > 0 (unfit_reason is NULL)
-- column: unfit_reason: why the step cannot be attributed: no requests, no token counts, no squared token counts, no attended context, zero latency; NULL when fit-ready
WITH ann AS (
    SELECT trace_id, event_id, name, pid, ts_ns, end_ns, dur_ns
    FROM stg_events
    WHERE kind IN ('user_annotation', 'nvtx_range') AND dur_ns > 0
),
side_sum AS (
    SELECT trace_id, step_name,
           count(*) AS batch_requests,
           count(*) FILTER (WHERE request_phase = 'prefill') AS prefill_requests,
           count(*) FILTER (WHERE request_phase = 'decode') AS decode_requests,
           sum(tokens) AS tokens_sum,
           sum(tokens * tokens) AS tokens_sq_sum,
           sum(context_tokens) AS context_sum,
           coalesce(sum(tokens) FILTER (WHERE request_phase = 'prefill'), 0) AS prefill_tokens_sum,
           coalesce(sum(tokens * tokens) FILTER (WHERE request_phase = 'prefill'), 0) AS prefill_tokens_sq_sum,
           coalesce(sum(context_tokens) FILTER (WHERE request_phase = 'prefill'), 0) AS prefill_context_sum,
           coalesce(sum(tokens) FILTER (WHERE request_phase = 'decode'), 0) AS decode_tokens_sum,
           coalesce(sum(tokens * tokens) FILTER (WHERE request_phase = 'decode'), 0) AS decode_tokens_sq_sum,
           coalesce(sum(context_tokens) FILTER (WHERE request_phase = 'decode'), 0) AS decode_context_sum
    FROM int_meta_step_requests GROUP BY ALL
),
side AS (
    SELECT a.*, 'sidecar' AS source, 1 AS richness, true AS detail,
           s.* EXCLUDE (trace_id, step_name)
    FROM ann a JOIN side_sum s ON s.trace_id = a.trace_id AND s.step_name = a.name
    QUALIFY row_number() OVER (PARTITION BY a.trace_id, a.name ORDER BY a.ts_ns, a.event_id) = 1
),
vllm_raw AS (
    SELECT a.*, regexp_extract(a.name,
        '^execute_(\d+)_context_(\d+)\(sq(\d+)sk(\d+)sqsq(\d+)sqsk(\d+)\)_generation_(\d+)\(sq(\d+)sk(\d+)sqsq(\d+)sqsk(\d+)\)$',
        ['n', 'cn', 'csq', 'csk', 'csqsq', 'csqsk', 'gn', 'gsq', 'gsk', 'gsqsq', 'gsqsk']) AS g
    FROM ann a WHERE starts_with(a.name, 'execute_')
),
vllm AS (
    SELECT trace_id, event_id, name, pid, ts_ns, end_ns, dur_ns, 'vllm_execute' AS source, 2 AS richness,
           false AS detail,
           CAST(g.cn AS BIGINT) + CAST(g.gn AS BIGINT) AS batch_requests,
           CAST(g.cn AS BIGINT) AS prefill_requests,
           CAST(g.gn AS BIGINT) AS decode_requests,
           CAST(g.csq AS BIGINT) + CAST(g.gsq AS BIGINT) AS tokens_sum,
           CAST(g.csqsq AS BIGINT) + CAST(g.gsqsq AS BIGINT) AS tokens_sq_sum,
           CAST(g.csk AS BIGINT) - CAST(g.csq AS BIGINT) + CAST(g.gsk AS BIGINT) - CAST(g.gsq AS BIGINT) AS context_sum,
           CAST(g.csq AS BIGINT) AS prefill_tokens_sum, CAST(g.csqsq AS BIGINT) AS prefill_tokens_sq_sum,
           CAST(g.csk AS BIGINT) - CAST(g.csq AS BIGINT) AS prefill_context_sum,
           CAST(g.gsq AS BIGINT) AS decode_tokens_sum, CAST(g.gsqsq AS BIGINT) AS decode_tokens_sq_sum,
           CAST(g.gsk AS BIGINT) - CAST(g.gsq AS BIGINT) AS decode_context_sum
    FROM vllm_raw WHERE g.n <> ''
),
-- Current vLLM: execute_context_<C>(<tokens>)_generation_<G>(<tokens>), each bracket the scheduled tokens of
-- that phase's requests: one count per request joined by '_' (then sum p and sum p^2 are known), or one sum
-- (what vLLM writes: sum p^2 then unknown unless the phase has one request, or as many tokens as requests, so that
-- every p_i is 1, as in plain decoding). No attended context, no request ids.
vllmc_raw AS (
    SELECT a.*, regexp_extract(a.name, '^execute_context_(\d+)\(([^)]*)\)_generation_(\d+)\(([^)]*)\)',
                                ['cn', 'ctoks', 'gn', 'gtoks']) AS g
    FROM ann a WHERE starts_with(a.name, 'execute_context_')
),
vllmc_tok AS (
    SELECT *, CAST(g.cn AS BIGINT) AS cn, CAST(g.gn AS BIGINT) AS gn,
           list_transform(regexp_extract_all(g.ctoks, '\d+'), lambda x: CAST(x AS BIGINT)) AS ct,
           list_transform(regexp_extract_all(g.gtoks, '\d+'), lambda x: CAST(x AS BIGINT)) AS gt
    FROM vllmc_raw WHERE g.cn <> ''
),
vllmc AS (
    SELECT trace_id, event_id, name, pid, ts_ns, end_ns, dur_ns, 'vllm_execute_context' AS source, 2 AS richness,
           false AS detail,
           cn + gn AS batch_requests, cn AS prefill_requests, gn AS decode_requests,
           coalesce(list_sum(ct), 0) + coalesce(list_sum(gt), 0) AS tokens_sum,
           coalesce(list_sum(ct), 0) AS prefill_tokens_sum,
           coalesce(list_sum(gt), 0) AS decode_tokens_sum,
           CASE WHEN cn = 0 THEN 0 WHEN len(ct) = cn OR cn = 1 THEN list_sum(list_transform(ct, lambda x: x * x))
                WHEN list_sum(ct) = cn THEN cn END AS prefill_tokens_sq_sum,
           CASE WHEN gn = 0 THEN 0 WHEN len(gt) = gn OR gn = 1 THEN list_sum(list_transform(gt, lambda x: x * x))
                WHEN list_sum(gt) = gn THEN gn END AS decode_tokens_sq_sum,
           CAST(NULL AS BIGINT) AS prefill_context_sum, CAST(NULL AS BIGINT) AS decode_context_sum,
           CAST(NULL AS BIGINT) AS context_sum
    FROM vllmc_tok
),
sglang_raw AS (
    SELECT a.*, upper(regexp_extract(a.name, '^step\[(EXTEND|DECODE)\b', 1, 'i')) AS kind,
           TRY_CAST(regexp_extract(a.name, '\bbs=(\d+)', 1) AS BIGINT) AS bs,
           TRY_CAST(regexp_extract(a.name, '\btoks=(\d+)', 1) AS BIGINT) AS toks
    FROM ann a WHERE regexp_matches(a.name, '^step\[(EXTEND|DECODE)\b', 'i')
),
sglang AS (
    SELECT trace_id, event_id, name, pid, ts_ns, end_ns, dur_ns, 'sglang_step' AS source, 3 AS richness,
           false AS detail,
           bs AS batch_requests,
           CASE WHEN kind = 'EXTEND' THEN bs ELSE 0 END AS prefill_requests,
           CASE WHEN kind = 'DECODE' THEN bs ELSE 0 END AS decode_requests,
           CASE WHEN kind = 'EXTEND' THEN toks ELSE bs END AS tokens_sum,
           CASE WHEN kind = 'DECODE' THEN bs END AS tokens_sq_sum,  -- p_i = 1 for every decode request
           CAST(NULL AS BIGINT) AS context_sum,
           CASE WHEN kind = 'EXTEND' THEN toks ELSE 0 END AS prefill_tokens_sum,
           CASE WHEN kind = 'DECODE' THEN 0 END AS prefill_tokens_sq_sum,
           CASE WHEN kind = 'DECODE' THEN 0 END AS prefill_context_sum,
           CASE WHEN kind = 'DECODE' THEN bs ELSE 0 END AS decode_tokens_sum,
           CASE WHEN kind = 'DECODE' THEN bs ELSE 0 END AS decode_tokens_sq_sum,
           CASE WHEN kind = 'EXTEND' THEN 0 END AS decode_context_sum
    FROM sglang_raw WHERE bs IS NOT NULL
),
cand_all AS (
    SELECT * FROM side
    UNION ALL BY NAME SELECT * FROM vllm
    UNION ALL BY NAME SELECT * FROM vllmc
    UNION ALL BY NAME SELECT * FROM sglang
),
-- Overlapping candidates are looked for only inside a cluster: the candidates of a (trace, process) sorted by
-- start, a new cluster where one starts at or after the end of every earlier one, so two that overlap share it.
-- The joins on (trace, pid, cluster) cost the sum of the clusters' squared sizes: linear in the steps where
-- annotations do not overlap, or overlap a few at a time as SGLang's two forms do (10^5 steps paired by
-- inequalities on (trace, pid) took 90 s; ours, issue 26).
cand AS (
    SELECT * EXCLUDE (prev_end_ns),
           sum(CASE WHEN prev_end_ns IS NULL OR ts_ns >= prev_end_ns THEN 1 ELSE 0 END)
               OVER (PARTITION BY trace_id, pid ORDER BY ts_ns, event_id ROWS UNBOUNDED PRECEDING) AS cluster
    FROM (SELECT *, max(end_ns) OVER (PARTITION BY trace_id, pid ORDER BY ts_ns, event_id
                                      ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end_ns
          FROM cand_all)
),
-- A candidate is kept unless an overlapping one on the same process has a richer source.
kept AS (
    SELECT c.* FROM cand c
    WHERE NOT EXISTS (
        SELECT 1 FROM cand o
        WHERE o.trace_id = c.trace_id AND o.pid = c.pid AND o.cluster = c.cluster
          AND o.ts_ns < c.end_ns AND c.ts_ns < o.end_ns AND o.richness < c.richness
    )
),
-- Timing: the shortest candidate overlapping the kept one (itself when none is shorter).
timed AS (
    SELECT k.trace_id, k.event_id, arg_min(o.ts_ns, (o.dur_ns, o.event_id)) AS step_ts_ns,
           arg_min(o.end_ns, (o.dur_ns, o.event_id)) AS step_end_ns
    FROM kept k JOIN cand o
      ON o.trace_id = k.trace_id AND o.pid = k.pid AND o.cluster = k.cluster
     AND o.ts_ns < k.end_ns AND k.ts_ns < o.end_ns
    GROUP BY k.trace_id, k.event_id
),
steps AS (
    SELECT k.*, t.step_ts_ns, t.step_end_ns FROM kept k JOIN timed t USING (trace_id, event_id)
),
-- A step's kernels: launched by the step's process (any process when that one launches none, as when the engine's
-- scheduler and its model runner are different processes) while the step ran (ours).
launching AS (SELECT DISTINCT trace_id, pid FROM kernel_taxbreak),
kern AS (
    SELECT s.trace_id, s.event_id, count(*) AS kernels, sum(k.kernel_dur_ns) AS device_active_ns,
           sum(coalesce(k.delta_ft_ns, 0) + coalesce(k.delta_ct_ns, 0) + coalesce(k.delta_kt_ns, 0)) AS t_orchestrate_ns,
           max(k.kernel_end_ns) AS last_kernel_end_ns
    FROM steps s
    LEFT JOIN launching l ON l.trace_id = s.trace_id AND l.pid = s.pid
    JOIN kernel_taxbreak k
      ON k.trace_id = s.trace_id AND (k.pid = s.pid OR l.pid IS NULL)
     AND coalesce(k.launch_ts_ns, k.kernel_ts_ns) >= s.step_ts_ns
     AND coalesce(k.launch_ts_ns, k.kernel_ts_ns) < s.step_end_ns
    GROUP BY ALL
),
-- A trace's model and GPU names, once per trace: the GPU name's fallback reads the trace's metadata JSON (a
-- sidecar's, steps[].requests[] included: up to 1 MiB). Read in base, it made every step row carry its trace's
-- meta_json into base's window (row_number), which holds its input: two synthetic serving traces' ~450 steps x
-- 234 KB beside a 10^5-step request list and the public traces ran out of the default 512 MB memory_limit here
-- ('could not allocate block'; length(meta_json) in its place fails the same way), while each trace alone passed
-- (issue 26).
trace_names AS (
    SELECT trace_id, coalesce(model, 'unknown') AS model_name,
           coalesce(gpu_name, CASE WHEN starts_with(json_extract_string(meta_json, '$.device'), 'cpu') THEN 'cpu' END,
                    'unknown') AS gpu_name
    FROM trace_meta
),
base AS (
SELECT
    s.trace_id,
    row_number() OVER (PARTITION BY s.trace_id ORDER BY s.step_ts_ns, s.event_id) AS step_id,
    s.name AS step_name,
    s.source AS composition_source,
    s.detail AS has_request_detail,
    tm.model_name,
    tm.gpu_name,
    CASE WHEN s.decode_requests = 0 THEN 'prefill' WHEN s.prefill_requests = 0 THEN 'decode' ELSE 'mixed' END AS phase,
    s.pid,
    s.step_ts_ns,
    s.step_end_ns,
    CAST(s.batch_requests AS BIGINT) AS batch_requests,
    CAST(s.prefill_requests AS BIGINT) AS prefill_requests,
    CAST(s.decode_requests AS BIGINT) AS decode_requests,
    CAST(s.tokens_sum AS BIGINT) AS tokens_sum,
    CAST(s.tokens_sq_sum AS BIGINT) AS tokens_sq_sum,
    CAST(s.context_sum AS BIGINT) AS context_sum,
    CAST(s.prefill_tokens_sum AS BIGINT) AS prefill_tokens_sum,
    CAST(s.prefill_tokens_sq_sum AS BIGINT) AS prefill_tokens_sq_sum,
    CAST(s.prefill_context_sum AS BIGINT) AS prefill_context_sum,
    CAST(s.decode_tokens_sum AS BIGINT) AS decode_tokens_sum,
    CAST(s.decode_tokens_sq_sum AS BIGINT) AS decode_tokens_sq_sum,
    CAST(s.decode_context_sum AS BIGINT) AS decode_context_sum,
    coalesce(k.kernels, 0) AS kernels,
    CAST(coalesce(k.device_active_ns, 0) AS BIGINT) AS device_active_ns,
    CAST(coalesce(k.t_orchestrate_ns, 0) AS BIGINT) AS t_orchestrate_ns,
    greatest(s.step_end_ns, coalesce(k.last_kernel_end_ns, s.step_end_ns)) - s.step_ts_ns AS latency_ns
FROM steps s
JOIN trace_names tm USING (trace_id)
LEFT JOIN kern k USING (trace_id, event_id)
),
reasoned AS (
    SELECT *, CASE
        WHEN batch_requests = 0 THEN 'no requests in the step'
        WHEN tokens_sum IS NULL THEN 'no token counts'
        WHEN prefill_tokens_sq_sum IS NULL OR decode_tokens_sq_sum IS NULL
            THEN 'no squared token counts (sum p^2): the annotation gives a phase''s token sum, not each request''s'
        WHEN prefill_context_sum IS NULL OR decode_context_sum IS NULL
            THEN 'no attended context (sum c): the annotation does not give the requests'' cached tokens'
        WHEN latency_ns <= 0 THEN 'zero latency'
        END AS unfit_reason
    FROM base
)
SELECT * EXCLUDE (unfit_reason), unfit_reason IS NULL AS fit_ready, unfit_reason FROM reasoned
