"""The paper's analyses (ConvBERT Tables 1, 2, 7, 8, 9 and Figures 2, 5, 6), one module each.

    python -m analysis.attention ...        attention maps and diagonal concentration C (Fig. 2/6, Table 8)
    python -m analysis.inference_speed ...  mixed vs self-attention block: GFLOPs and ms/sample (Table 9)
    python -m analysis.ablation ...         Table 1/2 and Fig. 5 variants: pre-train + GLUE (kernel-size curve)
    python -m analysis.model_table ...      parameters and FLOPs of every configs/ row (Tables 1 and 7)
    python -m analysis.curves ...           training curves from model_dirs' TensorBoard logs

Each writes a Markdown table, a JSON of its numbers and PNG plots into `--output_dir`.
docs/ANALYSIS.md shows what each produced and the command.
"""
