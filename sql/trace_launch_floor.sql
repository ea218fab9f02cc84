-- table: trace_launch_floor
-- grain: one row per analysed trace
-- reads: trace_meta, launch_floor_measurements, t_sys_defaults, gpu_arch_rules, stg_events, run_config
-- description: The launch floor T_sys used for each trace and its provenance (METHOD.md section 4): the null-kernel measurement of the same GPU model and host with the most samples (ties: lowest trace id) when one exists (a null-kernel trace uses its own), else the documented default by GPU name (H100 4.51 us, H200 4.30 us, other 4.50 us; SODA's fallbacks); a trace that names no GPU but whose kernel names state the architecture (gpu_arch_rules: `sm90_*` Hopper) takes that architecture's default and says it was inferred; a floor the user set (run_config.t_sys_override_ns: `taxbreak analyze --t-sys-ns`, $TAXBREAK_T_SYS_NS or taxbreak.toml) overrides both for every trace (ours).
-- column: trace_id: trace key
-- column: gpu_name: GPU model the floor is keyed on
-- column: host_name: host the floor is keyed on
-- column: t_sys_ns: the floor used as Delta KT per launch (ns)
-- column: t_sys_source: 'measured', 'default' or 'user_setting'
-- column: t_sys_rule: the default rule (default_h100, default_h200, default_other), 'null_kernel_trace' or 'user_setting'
-- column: t_sys_measured_trace_id: the null-kernel trace the floor was measured in, when measured
-- column: t_sys_is_default: true when a documented default was assumed (false for a user setting)
-- column: inferred_gpu_name: for a trace that names no GPU, the GPU the default was matched on, inferred from its kernel names (NULL otherwise)
-- column: inferred_gpu_rule: the gpu_arch_rules rule that inferred it (e.g. arch_sm90)
WITH measured AS (
    SELECT t.trace_id, m.trace_id AS measured_trace_id, m.t_sys_mean_ns
    FROM trace_meta t
    JOIN launch_floor_measurements m
      ON m.gpu_name IS NOT DISTINCT FROM t.gpu_name AND m.host_name IS NOT DISTINCT FROM t.host_name
    QUALIFY row_number() OVER (
        PARTITION BY t.trace_id ORDER BY (m.trace_id = t.trace_id) DESC, m.samples DESC, m.trace_id
    ) = 1
),
-- a trace that names no GPU: the architecture its kernel names state (METHOD.md section 4), first rule by priority
arch AS (
    SELECT k.trace_id, arg_min(r.gpu_name, r.priority) AS gpu_name, arg_min(r.rule, r.priority) AS rule
    FROM (SELECT DISTINCT trace_id, name FROM stg_events
          WHERE kind = 'kernel' AND trace_id IN (SELECT trace_id FROM trace_meta WHERE coalesce(gpu_name, '') = '')) k
    JOIN gpu_arch_rules r ON regexp_matches(k.name, r.kernel_pattern, 'i')
    GROUP BY k.trace_id
),
dflt AS (
    SELECT t.trace_id, d.t_sys_ns, d.rule
    FROM trace_meta t LEFT JOIN arch a USING (trace_id)
    JOIN t_sys_defaults d ON regexp_matches(coalesce(nullif(t.gpu_name, ''), a.gpu_name, ''), d.gpu_pattern, 'i')
    QUALIFY row_number() OVER (PARTITION BY t.trace_id ORDER BY d.priority) = 1
)
SELECT
    t.trace_id,
    t.gpu_name,
    t.host_name,
    coalesce(rc.t_sys_override_ns, m.t_sys_mean_ns, d.t_sys_ns) AS t_sys_ns,
    CASE WHEN rc.t_sys_override_ns IS NOT NULL THEN 'user_setting'
         WHEN m.trace_id IS NOT NULL THEN 'measured' ELSE 'default' END AS t_sys_source,
    CASE WHEN rc.t_sys_override_ns IS NOT NULL THEN 'user_setting'
         WHEN m.trace_id IS NOT NULL THEN 'null_kernel_trace' ELSE d.rule END AS t_sys_rule,
    CASE WHEN rc.t_sys_override_ns IS NULL THEN m.measured_trace_id END AS t_sys_measured_trace_id,
    rc.t_sys_override_ns IS NULL AND m.trace_id IS NULL AS t_sys_is_default,
    a.gpu_name AS inferred_gpu_name,
    a.rule AS inferred_gpu_rule
FROM trace_meta t
CROSS JOIN run_config rc
LEFT JOIN measured m USING (trace_id)
LEFT JOIN dflt d USING (trace_id)
LEFT JOIN arch a USING (trace_id)
