-- table: fusion_candidates
-- grain: one row per trace, chain length L (2..8) and kernel-name chain with proximity score at or above the threshold
-- reads: int_kernel_links, stg_events, trace_launch_floor, run_config, int_traces
-- description: Kernel-fusion candidates by proximity score (METHOD.md section 7): each process's kernels in launch order (launch call start, else kernel start), cut into segments at host synchronisation calls (*Synchronize*); every window of L consecutive kernels inside a segment is a chain c; PS(c) = count(c) / count(first kernel name in the trace). Kept: PS >= run_config.fusion_ps_threshold (1.0) and count(c) >= run_config.fusion_min_count (2, ours). Chains are compared by a 64-bit hash of their names.
-- column: trace_id: trace key
-- column: chain_len: L, kernels in the chain (kernels)
-- column: chain: the kernel names in order
-- column: first_kernel: first kernel name of the chain
-- column: occurrences: count(c), windows equal to the chain (overlapping windows counted) (chains)
-- column: first_kernel_count: invocations of first_kernel in the trace (kernels)
-- column: proximity_score: occurrences / first_kernel_count
-- column: launches_saved: (L - 1) * occurrences (launches)
-- column: host_time_saved_ns: (L - 1) * occurrences * T_sys (ns)
-- column: candidate_rank: rank among every candidate of the trace by host time saved (then longer chains, then chain text)
-- column: is_listed: the chain is in the trace's list of maximal, non-overlapping chains (METHOD.md section 7, ours): going down candidate_rank, a chain is listed unless its kernel names can overlap a listed chain's (contained in it, or the same chain shifted), so the savings of listed chains add up; decided among the run_config.fusion_list_pool (500) best candidates, false beyond
-- column: rank: rank among the listed chains (1 = most host time saved); NULL for chains not listed. The one ranking every output uses
WITH RECURSIVE
-- the sweep carries small integer keys (the trace's run-local number, int_traces; the process's), the kernel's
-- position and its name's hash instead of the trace id, pid and kernel name text; the names of the few listed chains
-- are looked up at the end
procs AS (
    SELECT p.trace_id, p.pid, t.trace_key AS tk, row_number() OVER (ORDER BY p.trace_id, p.pid) AS pk
    FROM (SELECT DISTINCT trace_id, pid FROM int_kernel_links) p JOIN int_traces t USING (trace_id)
),
kseq AS (
    SELECT p.tk, p.pk, k.kernel_seq, hash(k.kernel_name) AS h0, coalesce(k.launch_ts_ns, k.kernel_ts_ns) AS order_ts
    FROM int_kernel_links k JOIN procs p ON p.trace_id = k.trace_id AND p.pid IS NOT DISTINCT FROM k.pid
),
syncs AS (
    SELECT p.pk, s.ts_ns, row_number() OVER (PARTITION BY p.pk ORDER BY s.ts_ns, s.event_id) AS n
    FROM stg_events s JOIN procs p ON p.trace_id = s.trace_id AND p.pid = s.pid
    WHERE s.host_call_class = 'sync'
),
seg AS (
    SELECT k.*, coalesce(s.n, 0) AS segment
    FROM kseq k ASOF LEFT JOIN syncs s ON k.pk = s.pk AND k.order_ts >= s.ts_ns
),
w AS (
    SELECT
        tk, pk, segment, kernel_seq,
        row_number() OVER ws AS pos,
        h0,
        lead(h0, 1) OVER ws AS h1, lead(h0, 2) OVER ws AS h2,
        lead(h0, 3) OVER ws AS h3, lead(h0, 4) OVER ws AS h4,
        lead(h0, 5) OVER ws AS h5, lead(h0, 6) OVER ws AS h6,
        lead(h0, 7) OVER ws AS h7
    FROM seg
    WINDOW ws AS (PARTITION BY pk, segment ORDER BY order_ts, kernel_seq)
),
chains AS (
    SELECT tk, pk, segment, pos, h0, unnest([2, 3, 4, 5, 6, 7, 8]) AS chain_len,
           unnest([
               CASE WHEN h1 IS NOT NULL THEN hash(h0, h1) END,
               CASE WHEN h2 IS NOT NULL THEN hash(h0, h1, h2) END,
               CASE WHEN h3 IS NOT NULL THEN hash(h0, h1, h2, h3) END,
               CASE WHEN h4 IS NOT NULL THEN hash(h0, h1, h2, h3, h4) END,
               CASE WHEN h5 IS NOT NULL THEN hash(h0, h1, h2, h3, h4, h5) END,
               CASE WHEN h6 IS NOT NULL THEN hash(h0, h1, h2, h3, h4, h5, h6) END,
               CASE WHEN h7 IS NOT NULL THEN hash(h0, h1, h2, h3, h4, h5, h6, h7) END
           ]) AS chain_hash
    FROM w
    WHERE h1 IS NOT NULL
),
-- the example occurrence: the first by (segment, pos), the pair packed into one BIGINT (pos < 2^32), which the
-- aggregate over every chain compares faster than a struct
counted AS (
    SELECT tk, chain_len, chain_hash, any_value(h0) AS first_h, count(*) AS occurrences,
           arg_min(pk, segment * 4294967296 + pos) AS ex_pk,
           min(segment * 4294967296 + pos) // 4294967296 AS ex_segment,
           min(segment * 4294967296 + pos) % 4294967296 AS ex_pos
    FROM chains WHERE chain_hash IS NOT NULL
    GROUP BY tk, chain_len, chain_hash
),
-- the first kernel's invocations in the trace, by its name's hash (as the chains compare names)
firsts AS (
    SELECT tk, h0 AS first_h, count(*) AS first_kernel_count FROM kseq GROUP BY tk, h0
),
cand AS (
    SELECT c.*, f.first_kernel_count, c.occurrences / f.first_kernel_count AS proximity_score
    FROM counted c JOIN firsts f USING (tk, first_h) CROSS JOIN run_config rc
    WHERE c.occurrences / f.first_kernel_count >= rc.fusion_ps_threshold AND c.occurrences >= rc.fusion_min_count
),
named AS (
    SELECT c.tk, c.chain_len, c.chain_hash, list(k.kernel_name ORDER BY w.pos) AS chain,
           list(w.h0 ORDER BY w.pos) AS chain_names_h
    FROM cand c
    JOIN w ON w.pk = c.ex_pk AND w.segment = c.ex_segment AND w.pos BETWEEN c.ex_pos AND c.ex_pos + c.chain_len - 1
    JOIN (SELECT DISTINCT trace_id, tk FROM procs) t ON t.tk = c.tk
    JOIN int_kernel_links k ON k.trace_id = t.trace_id AND k.kernel_seq = w.kernel_seq
    GROUP BY c.tk, c.chain_len, c.chain_hash
),
ranked AS (
    SELECT t.trace_id, c.chain_len, c.chain_hash, n.chain[1] AS first_kernel, c.occurrences, c.first_kernel_count,
           c.proximity_score, n.chain, n.chain_names_h,
           row_number() OVER (
               PARTITION BY c.tk
               ORDER BY (c.chain_len - 1) * c.occurrences DESC, c.chain_len DESC, array_to_string(n.chain, ' ')
           ) AS candidate_rank
    FROM cand c JOIN named n USING (tk, chain_len, chain_hash)
    JOIN (SELECT DISTINCT trace_id, tk FROM procs) t ON t.tk = c.tk
),
pool AS (SELECT r.* FROM ranked r CROSS JOIN run_config rc WHERE r.candidate_rank <= rc.fusion_list_pool),
-- two chains can share a kernel invocation only if, at some offset d of the second against the first, their names
-- agree wherever they overlap; chains that cannot overlap never share a kernel, so their savings add up
conflicts AS (
    SELECT a.trace_id, a.candidate_rank, list(DISTINCT b.candidate_rank) AS earlier
    FROM pool a JOIN pool b ON a.trace_id = b.trace_id AND b.candidate_rank < a.candidate_rank
    WHERE EXISTS (
        SELECT 1 FROM range(-(len(b.chain_names_h) - 1), len(a.chain_names_h)) AS o(d)
        WHERE a.chain_names_h[greatest(0, o.d) + 1 : least(len(a.chain_names_h), len(b.chain_names_h) + o.d)]
            = b.chain_names_h[greatest(0, o.d) - o.d + 1 : least(len(a.chain_names_h), len(b.chain_names_h) + o.d) - o.d]
    )
    GROUP BY a.trace_id, a.candidate_rank
),
pool_c AS (
    SELECT p.trace_id, p.candidate_rank, coalesce(c.earlier, []) AS earlier
    FROM pool p LEFT JOIN conflicts c USING (trace_id, candidate_rank)
),
-- greedy down the ranking: a chain is listed when it conflicts with no listed chain
greedy(trace_id, r, listed) AS (
    SELECT trace_id, 1, [1] FROM pool_c WHERE candidate_rank = 1
    UNION ALL
    SELECT g.trace_id, g.r + 1,
           CASE WHEN list_has_any(p.earlier, g.listed) THEN g.listed ELSE list_append(g.listed, g.r + 1) END
    FROM greedy g JOIN pool_c p ON p.trace_id = g.trace_id AND p.candidate_rank = g.r + 1
),
listed AS (
    SELECT trace_id, unnest(arg_max(listed, r)) AS candidate_rank FROM greedy GROUP BY trace_id
),
listed_rank AS (
    SELECT trace_id, candidate_rank, row_number() OVER (PARTITION BY trace_id ORDER BY candidate_rank) AS rank
    FROM listed
)
SELECT
    c.trace_id,
    c.chain_len,
    c.chain,
    c.first_kernel,
    c.occurrences,
    c.first_kernel_count,
    c.proximity_score,
    (c.chain_len - 1) * c.occurrences AS launches_saved,
    (c.chain_len - 1) * c.occurrences * f.t_sys_ns AS host_time_saved_ns,
    c.candidate_rank,
    lr.rank IS NOT NULL AS is_listed,
    lr.rank
FROM ranked c
LEFT JOIN listed_rank lr USING (trace_id, candidate_rank)
JOIN trace_launch_floor f USING (trace_id)
