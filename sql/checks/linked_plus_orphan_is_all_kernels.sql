-- check: linked_plus_orphan_is_all_kernels
-- guards: taxbreak_by_scope
-- reads: taxbreak_by_scope
-- severity: error
-- description: linked_kernels + orphan_kernels = kernels in every scope.
SELECT trace_id, scope_kind, scope_key, kernels, linked_kernels, orphan_kernels
FROM taxbreak_by_scope
WHERE linked_kernels + orphan_kernels IS DISTINCT FROM kernels
