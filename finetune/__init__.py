"""Fine-tuning: GLUE data, features, metrics and leaderboard files (`finetune.glue`,
`finetune.features`), plus the task heads and training loop."""
