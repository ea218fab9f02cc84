-- table: request_model_fit
-- grain: one row per (model, GPU, phase) fitted: the step-latency model of co-batched serving steps (a prefill and a decode model, and a 'mixed' row holding the mixed steps' shared constant and figures)
-- reads: request_fit_rows (the numpy fit of taxbreak.features.requests.refit over serving_steps)
-- computed_by: taxbreak.features.requests.refit
-- description: LLMVisor's step-latency model (METHOD.md section 8 in docs/method.md): T(B) = beta + a1 sum p + a2 sum c + a3 sum p^2 + a4 |B|, fitted by least squares per model, GPU and phase (prefill, decode) with two segments split at a breakpoint on sum p chosen by grid search minimising the squared error (ours; at least max(5, 5% of the phase's steps) per side), and the token-count baseline alpha + gamma sum p fitted on the same steps. A mixed step (chunked prefill) is T_prefill(its prefill requests) + T_decode(its decode requests) + shared_ns, one constant fitted on the mixed steps' residuals (ours); a phase with too few pure steps is fitted jointly with the mixed steps (fit_basis). Written by `taxbreak requests --refit` and the pipeline's request_model_fit asset when new steps of the group arrive.
-- column: model_name: model (serving_steps.model_name)
-- column: gpu_name: GPU model (serving_steps.gpu_name)
-- column: phase: 'prefill' or 'decode' (a phase model), or 'mixed' (the mixed steps' shared constant and figures: no coefficients of its own)
-- column: fit_basis: 'pure' (fitted on the phase's pure steps), 'joint' (too few pure steps: fitted on them and the mixed steps together, by backfitting; ours) or 'composed' (the mixed row: the two phase models plus shared_ns)
-- column: steps_fitted: fit-ready steps the fit used: a joint phase model counts its pure and the mixed steps (steps)
-- column: phase_steps: fit-ready steps of this phase in serving_steps when fitted (pure steps of a phase, mixed steps for 'mixed'); a different count makes the group stale (steps)
-- column: traces: traces those steps came from (traces)
-- column: breakpoint_tokens: a step is in the low (memory-bound) segment when sum p <= this, else in the high (compute-bound) one; NULL: one segment (too few steps or one value of sum p) (tokens)
-- column: lo_steps: steps in the low segment (steps)
-- column: hi_steps: steps in the high segment (steps)
-- column: lo_beta: low segment beta, per step (ns)
-- column: lo_a1: low segment a1, per token processed (ns per token)
-- column: lo_a2: low segment a2, per attended context token (ns per token)
-- column: lo_a3: low segment a3, per squared token (ns per token squared)
-- column: lo_a4: low segment a4, per request in the batch (ns per request)
-- column: hi_beta: high segment beta (ns)
-- column: hi_a1: high segment a1 (ns per token)
-- column: hi_a2: high segment a2 (ns per token)
-- column: hi_a3: high segment a3 (ns per token squared)
-- column: hi_a4: high segment a4 (ns per request)
-- column: shared_ns: 'mixed' row: delta, the constant the two parts of a mixed step share, the mean residual of the mixed steps after both parts (0 with fewer than 20 mixed steps, or when a joint phase has no pure step: fit_note says); NULL for a phase model (ns)
-- column: dropped_terms: terms left out because their feature is collinear with an earlier one over the group's steps (decode: a3 and a4, since sum p = sum p^2 = |B|), or all zero (prefill without cached context: a2); stored as 0 (ours)
-- column: r2: coefficient of determination of the model over the phase's pure steps (mixed: over the mixed steps, each predicted as its two parts plus shared_ns); NULL with fewer than 2 such steps
-- column: rel_err_p50: median of |predicted - observed| / observed step latency
-- column: rel_err_p90: 90th percentile of that relative error
-- column: rel_err_p99: 99th percentile of that relative error
-- column: baseline_alpha: token-count baseline intercept (ns)
-- column: baseline_gamma: token-count baseline slope (ns per token)
-- column: baseline_r2: R2 of the baseline over the same steps
-- column: baseline_rel_err_p50: baseline median relative error
-- column: baseline_rel_err_p90: baseline 90th percentile relative error
-- column: baseline_rel_err_p99: baseline 99th percentile relative error
-- column: few_steps: the fit rests on fewer than 50 steps (taxbreak.features.requests.FEW_STEPS_WARNING, ours): read its figures with care
-- column: fit_note: why the fit is as it is: joint basis and why, delta = 0 and why, backfitting rounds, too few steps; '' when none
-- column: fit_seconds: time the fit took (s)
-- column: fitted_at: when the fit was made (UTC)
SELECT
    model_name, gpu_name, phase, fit_basis, steps_fitted, phase_steps, traces, breakpoint_tokens, lo_steps, hi_steps,
    lo_beta, lo_a1, lo_a2, lo_a3, lo_a4, hi_beta, hi_a1, hi_a2, hi_a3, hi_a4, shared_ns,
    dropped_terms, r2, rel_err_p50, rel_err_p90, rel_err_p99,
    baseline_alpha, baseline_gamma, baseline_r2, baseline_rel_err_p50, baseline_rel_err_p90, baseline_rel_err_p99,
    few_steps, fit_note, fit_seconds, fitted_at
FROM request_fit_rows
