-- title: Top kernels by GPU time
-- description: The ten kernels with the most total device time in each trace, with their mean duration (AKD).
SELECT m.file_name, k.rank_by_time, k.kernel_name, k.invocations, k.total_dur_ns, CAST(k.akd_ns AS BIGINT) AS akd_ns,
       round(k.time_share, 4) AS time_share
FROM skip_by_kernel k JOIN trace_meta m USING (trace_id)
WHERE k.rank_by_time <= 10
ORDER BY m.file_name, k.rank_by_time;
