-- title: Library vs framework kernels
-- description: Kernels reached through a vendor library front end (i_lib = 1: cuBLAS, cuDNN, ...) against
-- description: framework-native kernels: counts, device time and host translation cost.
SELECT CASE WHEN i_lib = 1 THEN 'library' ELSE 'framework' END AS path, count(*) AS kernels,
       sum(kernel_dur_ns) AS device_ns, sum(delta_ft_ns) AS delta_ft_ns, sum(delta_ct_ns) AS delta_ct_ns,
       count(DISTINCT kernel_name) AS distinct_kernels
FROM kernel_taxbreak
WHERE is_linked
GROUP BY 1
ORDER BY 1;
