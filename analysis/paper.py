"""The ConvBERT paper's own figures, in one place. They are printed beside our computed numbers as
labelled "paper" rows and checked against them in tests; nothing uses them as a result.

Pre-training FLOPs of the paper's recipes (Tables 3/7, and ELECTRA's) stay with the calculator that
reproduces them: model/flops.py `RECIPES[name]["paper"]`.
"""

# Table 1: parameters in millions, as the paper prints them (round(params / 1e6)), per configs/ row.
# Source: the figures quoted in the project's reproduction brief (configs/README.md, "Sources").
TABLE1_PARAMS_M = {
    "table1_bert_small": 14,
    "table1_electra_small": 14,
    "table1_convbert_small_bnk": 12,
    "table1_convbert_small": 14,
    "table1_electra_medium_small": 26,
    "table1_convbert_medium_small_bnk": 23,
    "table1_convbert_medium_small_bnk_gl": 14,
    "table1_convbert_medium_small_bnk_gl_larger": 17,
    "table1_convbert_medium_small": 17,
    "table1_bert_base": 110,
    "table1_electra_base": 110,
    "table1_convbert_base_bnk": 96,
    "table1_convbert_base": 106,
}

# Table 9 (= rebuttal Table 2): base attention blocks on a CPU (an i7-6900K); the paper states
# neither the sequence length nor the batch.
TABLE9_HARDWARE = "CPU (i7-6900K)"
TABLE9 = {"self": {"gflops_per_sample": 26.5, "ms_per_sample": 17.66},
          "mixed": {"gflops_per_sample": 19.3, "ms_per_sample": 12.94}}
