"""The registry: the readings (one per ambiguity a claim depends on), every :class:`Claim` in
report order (:data:`CLAIMS`, :data:`BY_ID`) and the ambiguity options (:data:`AMBIGUITIES`)."""

from __future__ import annotations

import dataclasses

from limits.claims.core import FINDING, PAPER, Claim, Reading
from limits.claims.judges_distance import (judge_fig2a_expected_derived,
                                           judge_fig2a_expected_printed, judge_fig2a_true,
                                           judge_fig2b_converge_derived,
                                           judge_fig2b_converge_printed, judge_fig2b_plateau,
                                           judge_fig2b_tightens, judge_fig2c, judge_thm1_bound)
from limits.claims.judges_gradient import (judge_cor3_printed, judge_cor3_tight,
                                           judge_fig4_collapse, judge_fig4_inverse_t,
                                           judge_lemma2, judge_simplex)
from limits.claims.judges_separability import (judge_fig3_band, judge_fig3_decline,
                                               judge_fig3_upper_derived,
                                               judge_fig3_upper_printed, judge_multihead,
                                               judge_sphere_band, judge_sphere_cap,
                                               judge_thm2_lower)
from limits.claims.judges_vanishing import (judge_cor1_band, judge_lemma1_bounded,
                                            judge_lemma1_model)

R_DFORM = Reading("AMBIG-1", (("sum", "d̃ = Σ‖α_i x_i − s‖"), ("norm", "d̃ = ‖Σ α_i x_i − s‖")))
R_XBAR = Reading("AMBIG-17", (("output", "x̄ = Σ α_j x_j"), ("mean", "x̄ = mean x_j")))
R_INCL = Reading("AMBIG-3", (("L-1", "N/(L−1)"), ("L", "N/L")))
R_JENSEN = Reading("AMBIG-4", (("main", "main sum"), ("jensen", "main sum + Jensen bound")))
R_KS = Reading("AMBIG-9", (("0.01", "α = 0.01"), ("0.05", "α = 0.05")))
R_LOGIT = Reading("AMBIG-12", (("raw", "T on raw q·k"), ("scaled", "T on q·k/√d_head")))
R_VECTORS = Reading("AMBIG-7", (("value", "x_i = per-head value vectors"),
                                ("key", "x_i = per-head key vectors"),
                                ("hidden", "x_i = the layer's normalised residual stream")),
                    by_step=True)
# The steps whose claims depend on the vectors x_i (Theorems 1 and 2 on the model): every claim
# they decide is also judged under R_VECTORS, from the reproduction's reading steps.
X_STEPS = ("distance_vary_length", "distance_vary_n", "distance_critical_n", "separability_model")

CLAIMS: tuple[Claim, ...] = (
    Claim("cor1-band", PAPER, "Lemma 1 / Cor. 1",
          "(1/L)·exp(−2Δ/T) ≤ α_i ≤ (1/L)·exp(2Δ/T), Δ = ‖q‖₂‖k‖₂",
          "model attention, every layer, head, query (causal prefix), L = 32…1024",
          "vanishing", "no query has a weight outside the band", judge_cor1_band,
          figure="vanishing.png"),
    Claim("lemma1-bounded", PAPER, "Lemma 1",
          "C_1/L ≤ α_i ≤ C_2/L for all i, with C_1, C_2 independent of L (F continuous, "
          "positive, not depending on L; logits in [−a, a])",
          "synthetic logits uniform on [−a, a], a = 4, F = exp and softplus, L = 32…1024",
          "vanishing", "no row violates the band", judge_lemma1_bounded),
    Claim("lemma1-model", PAPER, "Lemma 1 (model)",
          "any length-independent normalizer drives every weight to Θ(1/L)",
          "model attention, L = 32…1024", "vanishing",
          "not testable on a model (the logit bound a changes with L); slopes reported",
          judge_lemma1_model, figure="vanishing.png"),
    Claim("thm1-bound", PAPER, "Thm 1 (Eq. 9)",
          "d̃ ≤ (1 − ᾱ_N)·d_1 + R_N·Σ_{i∉I_N}|ᾱ_N − α_i| for a fixed top-N set",
          "model, N = 5, L = 32…1024, every head and query", "distance_vary_length",
          "never violated", judge_thm1_bound, (R_DFORM,), figure="fig2_vary_length.png"),
    Claim("fig2a-linear-true", PAPER, "Fig. 2a",
          "the true distance and its expectation both grow roughly linearly in L (N = 5); "
          "here: the true distance", "model, N = 5, L = 32…1024, head mean",
          "distance_vary_length", "log-log exponent in [0.8, 1.2] and straight-line R² ≥ 0.95",
          judge_fig2a_true, (R_DFORM,), figure="fig2_vary_length.png"),
    Claim("fig2a-linear-expected", PAPER, "Fig. 2a",
          "the expectation also grows linearly in L (N = 5); E as printed: "
          "((L − N)/L)·Σ_i ‖(α_i + N/(L − 1))·x_i − x̄‖₂ + ε",
          "model, N = 5, L = 32…1024, head mean", "distance_vary_length",
          "log-log exponent in [0.8, 1.2] and straight-line R² ≥ 0.95",
          judge_fig2a_expected_printed, (R_XBAR,), figure="fig2_vary_length.png"),
    Claim("fig2b-plateau", PAPER, "Fig. 2b",
          "beyond N ≈ 20 returns diminish: the distance plateaus",
          "model, L = 1024, N ∈ {1, 5, 10, 20, 100}, head mean", "distance_vary_n",
          "grew ≥ 10 % up to N = 20; log-log slope after N = 20 ≤ ½ the slope before",
          judge_fig2b_plateau, (R_DFORM,), figure="fig2_vary_n.png"),
    Claim("fig2b-bound-tightens", PAPER, "Fig. 2b",
          "beyond N ≈ 20 the distance plateaus while the bound tightens",
          "model, L = 1024, N ∈ {1, 5, 10, 20, 100}, head mean", "distance_vary_n",
          "d_max/d̃ at the largest N below its value at N = 20", judge_fig2b_tightens,
          (R_DFORM,), figure="fig2_vary_n.png"),
    Claim("fig2b-converge", PAPER, "Fig. 2b / Cor. 2(ii)",
          "as N approaches 100 the true and expected distances converge; E as printed",
          "model, L = 1024, N ∈ {1, 5, 10, 20, 100}, head mean", "distance_vary_n",
          "|d̃ − E|/d̃ < 0.10 at the largest N and below its value at the smallest N",
          judge_fig2b_converge_printed, (R_XBAR, R_DFORM), figure="fig2_vary_n.png"),
    Claim("fig2c-critical-n", PAPER, "Fig. 2c",
          "fewer than 6 % of tokens need to be selected before the true and expected distance "
          "distributions become indistinguishable (KS, α = 0.01): critical N ≈ 0.06 L",
          "model, L = 32…1024, KS on per-head means of d̃ and the reconstructed E",
          "distance_critical_n", "least-squares N_crit/L in [0.03, 0.12]", judge_fig2c,
          (R_KS,), figure="fig2_critical_n.png"),
    Claim("fig3-decline", PAPER, "Fig. 3",
          "the fraction of distinguishable tokens declines up to N ≈ 16, then saturates",
          "model value vectors on the unit sphere, L = 1024, N = 1…128, median over heads",
          "separability_model",
          "median falls ≥ 10 % up to N = 16; log-log slope after ≤ ½ the slope before",
          judge_fig3_decline, figure="figure3.png"),
    Claim("fig3-band", PAPER, "Fig. 3",
          "N_s/N saturates between 0.70 and 0.85: roughly one fifth of the selected tokens "
          "stay outside B_r(s)", "model value vectors on the unit sphere, L = 1024, N ≥ 16",
          "separability_model", "median over heads in [0.70, 0.85] at every N ≥ 16",
          judge_fig3_band, figure="figure3.png"),
    Claim("thm2-lower-model", PAPER, "Thm 2 (Eq. 11)",
          "1 − (1/(N·r))·Σ_{i∈I_N} ξ_i ≤ E[N_s]/N (the lower bound is intentionally "
          "conservative)", "model value vectors on the unit sphere, L = 1024, N = 1…128",
          "separability_model", "no head below its bound", judge_thm2_lower,
          figure="figure3.png"),
    Claim("fig3-upper-tracks", PAPER, "Fig. 3",
          "the exponential upper bound tracks the empirical maxima closely; printed form "
          "(1/N)·Σ exp[−(r − ξ_i)²/(16M²)]",
          "model value vectors on the unit sphere, L = 1024, N = 1…128", "separability_model",
          "bound − max N_s/N ≤ 0.10 at every N; never below N_s/N",
          judge_fig3_upper_printed, figure="figure3.png"),
    Claim("thm2-lower-sphere", PAPER, "Thm 2, sphere",
          "under Assumptions 1–2 (uniform on S^{d−1}(M), separation δ): "
          "1 − (1/(N·r))·Σ ξ_i ≤ E[N_s]/N",
          "uniform points on the unit sphere, softmax weights, L = 1024, N = 1…128",
          "separability_sphere", "no head below its bound (3 standard errors)",
          judge_thm2_lower, figure="figure3.png"),
    Claim("sphere-cap", PAPER, "§3.3 headline",
          "even with idealized spherical embeddings, a single softmax head cannot cleanly "
          "separate more than ~80 % (about four fifths) of its selected tokens",
          "uniform points on the unit sphere, softmax weights, L = 1024, N ≥ 16",
          "separability_sphere", "no head's mean N_s/N above 0.85 at any N ≥ 16",
          judge_sphere_cap, figure="figure3.png"),
    Claim("multihead-coverage", PAPER, "§4 multi-head",
          "if heads are independent and each separates a fraction p, H heads cover "
          "1 − (1 − p)^H; with p = 0.8, H ≈ 3 gives ≈ 99 %",
          "p from fig3-band (model, N ≥ 16)", "separability_model",
          "measured p in the paper's band [0.70, 0.85]", judge_multihead,
          derived_from=("fig3-band",), figure="figure3.png"),
    Claim("cor3-printed", PAPER, "Cor. 3",
          "‖∇_l α‖₂ ≤ min{1/(4T), √2} for softmax",
          "the tied top-two row at every T, and model logit rows at L = 1024",
          "gradient", "no row above the bound", judge_cor3_printed, figure="gradient.png"),
    Claim("lemma2", PAPER, "Lemma 2",
          "‖∇_l α‖₂ ≤ (max_j|F'_j|/L)·(1/min_j F_j + max_j F_j/(min_j F_j)²) (reconstructed)",
          "softmax on model logit rows at L = 1024, every T", "gradient",
          "no row above the bound", judge_lemma2, figure="gradient.png"),
    Claim("fig4-inverse-t", PAPER, "Fig. 4",
          "for T < 0.1 the curves follow the 1/T trend of Corollary 3",
          "max over heads of the token-mean g(T, ε), ε ∈ {1e-3, 0.1, 10}, model rows",
          "gradient", "log-log slope within 0.25 of −1 for every ε", judge_fig4_inverse_t,
          (R_LOGIT,), figure="gradient.png"),
    Claim("fig4-collapse", PAPER, "Fig. 4",
          "for T ≥ 1 all curves collapse together and drop by about two orders of magnitude",
          "max over heads of the token-mean g(T, ε), ε ∈ {1e-3, 0.1, 10}, model rows",
          "gradient", "ε-curves within ×2 at every T ≥ 1; each drops 2 ± 0.5 decades over "
          "two decades of T", judge_fig4_collapse, (R_LOGIT,), figure="gradient.png"),
    # The suite's own findings (not counted in the paper's tally).
    Claim("cor3-tight", FINDING, "Cor. 3 (tight)",
          "‖∇_l α‖₂ ≤ 1/(2T), attained by two tied top logits (the suite's bound)",
          "the tied top-two row and model logit rows", "gradient", "max T·‖J‖₂ ≤ 1/2",
          judge_cor3_tight, figure="gradient.png"),
    Claim("simplex-diameter", FINDING, "§3.4",
          "g(T, ε) ≤ √2/ε (the simplex diameter; the suite's reading of the √2 in Cor. 3)",
          "synthetic logit rows, L = 64", "gradient_synthetic", "no row above √2/ε",
          judge_simplex, figure="gradient.png"),
    Claim("thm2-upper-derived", FINDING, "Thm 2 (derived)",
          "the upper bound in the suite's derived form (1/N)·Σ exp[−(ξ_i − r)_+²/(2M²)] tracks "
          "the empirical maxima", "model value vectors on the unit sphere, L = 1024",
          "separability_model", "bound − max N_s/N ≤ 0.10 at every N; never below N_s/N",
          judge_fig3_upper_derived, figure="figure3.png"),
    Claim("fig2a-expected-derived", FINDING, "Fig. 2a (derived E)",
          "the reconstructed expectation ((L−N)/L)·Σ_i ‖α_i x_i − p·Σ_{j≠i} α_j x_j‖ grows "
          "linearly in L", "model, N = 5, L = 32…1024, head mean", "distance_vary_length",
          "log-log exponent in [0.8, 1.2] and straight-line R² ≥ 0.95",
          judge_fig2a_expected_derived, (R_INCL, R_JENSEN), figure="fig2_vary_length.png"),
    Claim("fig2b-converge-derived", FINDING, "Fig. 2b (derived E)",
          "true and reconstructed expected distances converge as N → 100",
          "model, L = 1024, N ∈ {1, 5, 10, 20, 100}, head mean", "distance_vary_n",
          "|d̃ − E|/d̃ < 0.10 at the largest N and below its value at the smallest N",
          judge_fig2b_converge_derived, (R_DFORM, R_INCL, R_JENSEN), figure="fig2_vary_n.png"),
    Claim("sphere-band", FINDING, "Fig. 3 band on the sphere",
          "N_s/N in 0.70–0.85 for N ≥ 16 on uniform sphere points (the suite's extrapolation "
          "of fig3-band; the paper claims only the cap sphere-cap there)",
          "uniform points on the unit sphere, softmax weights, L = 1024", "separability_sphere",
          "median over heads in [0.70, 0.85] at every N ≥ 16", judge_sphere_band,
          figure="figure3.png"),
)
CLAIMS = tuple(dataclasses.replace(c, readings=c.readings + (R_VECTORS,))
               if c.step in X_STEPS else c for c in CLAIMS)
BY_ID = {c.id: c for c in CLAIMS}

AMBIGUITIES = {
    "AMBIG-1": "d̃ is the sum of per-token norms Σ_{i∉I_N}‖α_i x_i − s‖ (default) or the norm of "
    "the sum ‖Σ_{i∉I_N} α_i x_i − s‖; Theorem 1's bound follows the form",
    "AMBIG-2": "Δ = ‖q‖·max_i‖k_i‖ in Corollary 1",
    "AMBIG-3": "inclusion probability N/(L−1) (default) or N/L in the reconstructed E",
    "AMBIG-4": "the plotted and KS-tested expectation is the Jensen main sum (default) or the main "
    "sum plus the Jensen-gap bound",
    "AMBIG-5": "Theorem 2's upper bound: exponent (r − ξ_i)²/(16M²) as printed (the paper's "
    "claim) or (ξ_i − r)_+²/(2M²) as derived from Hoeffding (the suite's finding)",
    "AMBIG-6": "War and Peace, Project Gutenberg #2600, body from Book One Chapter I; "
    "consecutive non-overlapping L-token windows",
    "AMBIG-7": "x_i = per-head value vectors (default), per-head key vectors, or the layer's "
    "normalised residual stream (the attention block's input); normalised to the sphere for "
    "Theorem 2",
    "AMBIG-8": "every query t with its causal prefix; t ≤ N skipped; attention sink kept",
    "AMBIG-9": "KS significance α = 0.01 (main text, default) or 0.05 (Algorithm 3)",
    "AMBIG-10": "M = 1; δ = minimum pairwise distance over the prefix; strict inequality",
    "AMBIG-11": "T on a log grid 1e-3…1e2",
    "AMBIG-12": "the paper's T values refer to raw logits q·k (default; GPT-2's native T = 8) "
    "or to HF-scaled logits q·k/√d_head (native T = 1): thresholds scale by √d_head",
    "AMBIG-13": "perturbation v isotropic Gaussian, unit length, visible positions only",
    "AMBIG-14": "L ∈ {32, …, 1024}; N searched by bisection with monotonicity checked",
    "AMBIG-15": "Fig. 2 mean over heads; Fig. 3 boxes over heads; Fig. 4 max over heads",
    "AMBIG-17": "x̄ in the printed E (undefined there): the attention output Σ_j α_j x_j "
    "(default) or the plain mean of the x_j",
}
