-- table: int_kernel_names
-- grain: one row per distinct kernel name of the traces being analysed
-- reads: stg_events, lib_kernel_rules
-- materialize: temp
-- description: Each kernel name's own name, short name and name rule (docs/method.md section 2), the one place they are derived for the analyses. A demangled name is [return type] qualified::name[<template arguments>](parameters); its own name is the qualified function name with the return type, template arguments and parameter list removed (`std::enable_if<!(false), void>::type internal::gemvx::kernel<...>(...)` -> `internal::gemvx::kernel`), its short name folds each template-argument group to `<…>`. Parse: operator tokens (`operator()`, `operator<`, ...) and the namespace markers `(anonymous namespace)` / `<unnamed>` are set aside, the innermost `<...>` and `(...)` groups are removed until none is left, trailing qualifiers (`const`, `[clone ...]`) dropped and the last space-separated word kept; taxbreak.read.kernel_names (the readers' labels) applies the same expressions and a test keeps the two equal. The name rule is the first lib_kernel_rules rule by priority whose pattern matches the own name (match_on 'own_name') or the whole name (match_on 'signature': vendor-library API types such as cublasGemvParams, cublasLtEpilogue_t, cudnnKernelDataType_t in the template arguments or parameters). A run-local table, never kept in the warehouse.
-- column: kernel_name: kernel name as the trace writes it
-- column: kernel_own_name: the qualified function name: return type, template arguments and parameters removed
-- column: kernel_short_name: the own name with each template-argument group folded to <…>
-- column: name_i_lib: I_lib by the name rule (NULL: no rule matched)
-- column: name_rule: the lib_kernel_rules rule that matched (NULL: none)
WITH RECURSIVE
names AS (SELECT DISTINCT name AS kernel_name FROM stg_events WHERE kind = 'kernel' AND name IS NOT NULL),
-- the namespace markers become one character each, an operator token's brackets private-use characters
-- (U+E000-E005 for ( ) [ ] < >), so the group removal below leaves them alone
marked AS (
    SELECT kernel_name,
           list_reduce(
               [['\boperator\s*\(\)', 'operator' || chr(57344) || chr(57345)],
                ['\boperator\s*\[\]', 'operator' || chr(57346) || chr(57347)],
                ['\boperator\s*<<=', 'operator' || chr(57348) || chr(57348) || '='],
                ['\boperator\s*>>=', 'operator' || chr(57349) || chr(57349) || '='],
                ['\boperator\s*<=>', 'operator' || chr(57348) || '=' || chr(57349)],
                ['\boperator\s*<<', 'operator' || chr(57348) || chr(57348)],
                ['\boperator\s*>>', 'operator' || chr(57349) || chr(57349)],
                ['\boperator\s*<=', 'operator' || chr(57348) || '='],
                ['\boperator\s*>=', 'operator' || chr(57349) || '='],
                ['\boperator\s*->\*', 'operator-' || chr(57349) || '*'],
                ['\boperator\s*->', 'operator-' || chr(57349)],
                ['\boperator\s*<', 'operator' || chr(57348)],
                ['\boperator\s*>', 'operator' || chr(57349)]],
               lambda acc, r: regexp_replace(acc, r[1], r[2], 'g'),
               replace(replace(trim(kernel_name), '(anonymous namespace)', chr(57360)), '<unnamed>', chr(57361)))
               AS s
    FROM names
),
-- one pass removes the innermost template groups (each leaves the mark U+E020) and then the innermost parenthesis
-- groups; passes repeat until nothing changes (at most 64)
passes(kernel_name, s, pass, done) AS (
    SELECT kernel_name, s, 0, false FROM marked
    UNION ALL
    SELECT kernel_name, t, pass + 1, t = s
    FROM (SELECT kernel_name, s, pass,
                 regexp_replace(regexp_replace(s, '<[^<>()]*>', chr(57376), 'g'), '\([^<>()]*\)', '', 'g') AS t
          FROM passes WHERE NOT done AND pass < 64)
),
parsed AS (
    SELECT kernel_name,
           regexp_extract(regexp_replace(s, '(\s*\[clone [^\]]*\]|\s+(const|volatile|noexcept))+\s*$', ''),
                          '(\S+)\s*$', 1) AS word
    FROM passes
    QUALIFY pass = max(pass) OVER (PARTITION BY kernel_name)
),
own AS (
    SELECT kernel_name,
           translate(replace(replace(replace(word, chr(57376), ''), chr(57360), '(anonymous namespace)'),
                             chr(57361), '<unnamed>'),
                     chr(57344) || chr(57345) || chr(57346) || chr(57347) || chr(57348) || chr(57349), '()[]<>')
               AS kernel_own_name,
           translate(replace(replace(replace(word, chr(57376), '<…>'), chr(57360), '(anonymous namespace)'),
                             chr(57361), '<unnamed>'),
                     chr(57344) || chr(57345) || chr(57346) || chr(57347) || chr(57348) || chr(57349), '()[]<>')
               AS kernel_short_name
    FROM parsed
),
name_rule AS (
    SELECT o.kernel_name, r.i_lib, r.rule
    FROM own o JOIN lib_kernel_rules r
      ON regexp_matches(CASE r.match_on WHEN 'signature' THEN o.kernel_name ELSE o.kernel_own_name END, r.pattern, 'i')
    QUALIFY row_number() OVER (PARTITION BY o.kernel_name ORDER BY r.priority) = 1
)
SELECT
    o.kernel_name,
    o.kernel_own_name,
    o.kernel_short_name,
    nr.i_lib AS name_i_lib,
    nr.rule AS name_rule
FROM own o
LEFT JOIN name_rule nr USING (kernel_name)
