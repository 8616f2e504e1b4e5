"""Streaming readers of raw tables in bounded memory: Criteo TSV (criteo, tokenizer) and a party's own CSV/TSV file with a header (party)."""
