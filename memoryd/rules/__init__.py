"""Evidence to rules (seed 000): observations, compile prepare/apply, rules, resolve."""
