-- title: Per-op dispatch cost
-- description: Framework ops by host orchestration cost per launch (ΔFT + ΔCT + ΔKT per charged launch).
SELECT scope_key AS op_name, sum(linked_launches) AS launches, sum(t_orchestrate_ns) AS t_orchestrate_ns,
       CAST(sum(t_orchestrate_ns) / nullif(sum(linked_launches), 0) AS BIGINT) AS ns_per_launch,
       CAST(sum(t_dispatch_ns) / nullif(sum(linked_launches), 0) AS BIGINT) AS dispatch_ns_per_launch
FROM taxbreak_by_scope
WHERE scope_kind = 'op'
GROUP BY scope_key
ORDER BY t_orchestrate_ns DESC
LIMIT 20;
