-- title: Fusion candidates by saved time
-- description: Kernel chains that always run together, ranked by the host launch time fusing them would save.
SELECT m.file_name, f.chain_len, f.occurrences, round(f.proximity_score, 3) AS proximity_score,
       f.launches_saved, f.host_time_saved_ns, array_to_string(f.chain, ' -> ') AS chain
FROM fusion_candidates f JOIN trace_meta m USING (trace_id)
ORDER BY f.host_time_saved_ns DESC, f.chain_len DESC
LIMIT 20;
