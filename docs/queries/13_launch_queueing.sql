-- title: Launch queueing (TKLQT) and negative samples
-- description: Total kernel launch-to-start time per trace; negative samples are counted apart, never clamped.
SELECT m.file_name, s.launch_samples, s.tklqt_ns, CAST(s.mean_launch_to_start_ns AS BIGINT) AS mean_ns,
       s.negative_samples, s.negative_sum_ns, s.gpu_idle_merged_ns
FROM skip_by_trace s JOIN trace_meta m USING (trace_id)
ORDER BY s.tklqt_ns DESC;
