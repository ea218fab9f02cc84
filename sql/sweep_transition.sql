-- table: sweep_transition
-- grain: one row per batch-size sweep (sweep_points.sweep_key)
-- reads: sweep_points
-- scope: cross_trace
-- description: The CPU-bound to GPU-bound transition of a sweep (METHOD.md section 6, ours): TKLQT stays flat while the host is the bottleneck and rises once kernels queue; the transition is the smallest batch size B with TKLQT(B) > 1.25 x the median TKLQT of the two smallest batch sizes, cross-checked with the first batch size whose HDBI reaches 0.5. Points of equal batch size count by their median. Computed over every trace in the warehouse.
-- column: sweep_key: the sweep (sweep_points.sweep_key)
-- column: model: model name (the sweep's first, by batch size)
-- column: model_kind: 'dense' or 'moe'
-- column: seq_len: sequence (prompt) length (tokens)
-- column: phase: phase of the sweep's points; NULL for whole generations
-- column: points: traces in the sweep (traces)
-- column: batch_sizes: distinct batch sizes (batch sizes)
-- column: min_batch_size: smallest batch size (requests)
-- column: max_batch_size: largest batch size (requests)
-- column: baseline_tklqt_ns: median TKLQT of the two smallest batch sizes (their mean) (ns)
-- column: tklqt_threshold_ns: 1.25 x baseline_tklqt_ns (ns)
-- column: tklqt_transition_batch_size: smallest batch size with TKLQT > tklqt_threshold_ns; NULL when none (requests)
-- column: hdbi_transition_batch_size: smallest batch size with HDBI >= 0.5; NULL when none (requests)
-- column: hdbi_crossing_batch_size: where HDBI first crosses 0.5 between two consecutive batch sizes, interpolated linearly in log2(batch size); NULL when it does not cross (requests)
-- column: transitions_agree: the TKLQT rule and the HDBI rule name the same batch size (or both none)
WITH
b AS (
    SELECT
        sweep_key, batch_size,
        quantile_cont(tklqt_ns, 0.5) AS tklqt_ns,
        quantile_cont(hdbi, 0.5) AS hdbi,
        min(batch_rank) AS batch_rank
    FROM sweep_points GROUP BY sweep_key, batch_size
),
base AS (
    SELECT sweep_key, quantile_cont(tklqt_ns, 0.5) AS baseline_tklqt_ns
    FROM b WHERE batch_rank <= 2 GROUP BY sweep_key
),
cross_pairs AS (
    SELECT sweep_key, batch_size, hdbi,
           lead(batch_size) OVER w AS next_batch_size, lead(hdbi) OVER w AS next_hdbi
    FROM b WHERE hdbi IS NOT NULL
    WINDOW w AS (PARTITION BY sweep_key ORDER BY batch_size)
),
crossing AS (
    SELECT
        sweep_key,
        arg_min(
            pow(2, log2(batch_size) + (0.5 - hdbi) / (next_hdbi - hdbi) * (log2(next_batch_size) - log2(batch_size))),
            batch_size
        ) AS hdbi_crossing_batch_size
    FROM cross_pairs
    WHERE next_hdbi IS NOT NULL AND (hdbi - 0.5) * (next_hdbi - 0.5) <= 0 AND hdbi <> next_hdbi
    GROUP BY sweep_key
),
meta AS (
    SELECT
        sweep_key,
        arg_min(model, batch_size) AS model,
        arg_min(model_kind, batch_size) AS model_kind,
        arg_min(seq_len, batch_size) AS seq_len,
        arg_min(phase, batch_size) AS phase,
        count(*) AS points,
        count(DISTINCT batch_size) AS batch_sizes,
        min(batch_size) AS min_batch_size,
        max(batch_size) AS max_batch_size
    FROM sweep_points GROUP BY sweep_key
),
rules AS (
    SELECT
        b.sweep_key,
        min(b.batch_size) FILTER (WHERE b.tklqt_ns > 1.25 * base.baseline_tklqt_ns) AS tklqt_transition_batch_size,
        min(b.batch_size) FILTER (WHERE b.hdbi >= 0.5) AS hdbi_transition_batch_size
    FROM b JOIN base USING (sweep_key) GROUP BY b.sweep_key
)
SELECT
    m.sweep_key,
    m.model,
    m.model_kind,
    m.seq_len,
    m.phase,
    m.points,
    m.batch_sizes,
    m.min_batch_size,
    m.max_batch_size,
    base.baseline_tklqt_ns,
    1.25 * base.baseline_tklqt_ns AS tklqt_threshold_ns,
    r.tklqt_transition_batch_size,
    r.hdbi_transition_batch_size,
    c.hdbi_crossing_batch_size,
    r.tklqt_transition_batch_size IS NOT DISTINCT FROM r.hdbi_transition_batch_size AS transitions_agree
FROM meta m
LEFT JOIN base USING (sweep_key)
LEFT JOIN rules r USING (sweep_key)
LEFT JOIN crossing c USING (sweep_key)
