-- check: hdbi_in_unit_interval
-- guards: taxbreak_by_scope
-- reads: taxbreak_by_scope
-- severity: error
-- description: HDBI and HDBI_linked lie in [0, 1] wherever defined (docs/method.md section 2).
-- Each check selects the rows that break its rule; it passes when it selects none.
SELECT trace_id, scope_kind, scope_key, hdbi, hdbi_linked
FROM taxbreak_by_scope
WHERE NOT (hdbi BETWEEN 0 AND 1) OR NOT (hdbi_linked BETWEEN 0 AND 1)
