-- title: Kernels per token by model
-- description: Paper-compatible and decode-only kernels per output token, per model and model kind.
SELECT m.model, m.model_kind, count(*) AS traces, round(avg(k.kpt), 1) AS kpt,
       round(avg(k.kpt_decode), 1) AS kpt_decode, round(avg(k.kernel_diversity), 3) AS kernel_diversity
FROM kernels_per_token k JOIN trace_meta m USING (trace_id)
WHERE k.kpt IS NOT NULL
GROUP BY m.model, m.model_kind
ORDER BY m.model;
