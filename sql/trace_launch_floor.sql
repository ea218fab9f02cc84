-- table: trace_launch_floor
-- grain: one row per analysed trace
-- reads: trace_meta, launch_floor_measurements, t_sys_defaults
-- description: The launch floor T_sys used for each trace and its provenance (METHOD.md section 4): the null-kernel measurement of the same GPU model and host with the most samples (ties: lowest trace id) when one exists (a null-kernel trace uses its own), else the documented default by GPU name (H100 4.51 us, H200 4.30 us, other 4.50 us; SODA's fallbacks).
-- column: trace_id: trace key
-- column: gpu_name: GPU model the floor is keyed on
-- column: host_name: host the floor is keyed on
-- column: t_sys_ns: the floor used as Delta KT per launch (ns)
-- column: t_sys_source: 'measured' or 'default'
-- column: t_sys_rule: the default rule (default_h100, default_h200, default_other) or 'null_kernel_trace'
-- column: t_sys_measured_trace_id: the null-kernel trace the floor was measured in, when measured
-- column: t_sys_is_default: true when a documented default was assumed
WITH measured AS (
    SELECT t.trace_id, m.trace_id AS measured_trace_id, m.t_sys_mean_ns
    FROM trace_meta t
    JOIN launch_floor_measurements m
      ON m.gpu_name IS NOT DISTINCT FROM t.gpu_name AND m.host_name IS NOT DISTINCT FROM t.host_name
    QUALIFY row_number() OVER (
        PARTITION BY t.trace_id ORDER BY (m.trace_id = t.trace_id) DESC, m.samples DESC, m.trace_id
    ) = 1
),
dflt AS (
    SELECT t.trace_id, d.t_sys_ns, d.rule
    FROM trace_meta t JOIN t_sys_defaults d ON regexp_matches(coalesce(t.gpu_name, ''), d.gpu_pattern, 'i')
    QUALIFY row_number() OVER (PARTITION BY t.trace_id ORDER BY d.priority) = 1
)
SELECT
    t.trace_id,
    t.gpu_name,
    t.host_name,
    coalesce(m.t_sys_mean_ns, d.t_sys_ns) AS t_sys_ns,
    CASE WHEN m.trace_id IS NOT NULL THEN 'measured' ELSE 'default' END AS t_sys_source,
    CASE WHEN m.trace_id IS NOT NULL THEN 'null_kernel_trace' ELSE d.rule END AS t_sys_rule,
    m.measured_trace_id AS t_sys_measured_trace_id,
    m.trace_id IS NULL AS t_sys_is_default
FROM trace_meta t
LEFT JOIN measured m USING (trace_id)
LEFT JOIN dflt d USING (trace_id)
