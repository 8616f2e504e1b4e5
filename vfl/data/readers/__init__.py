"""Streaming readers of raw files in bounded memory: Criteo TSV and a party's own file.

criteo_tsv and tokenizer: raw Criteo TSV; party_file: a Criteo-style party file; table_file: CSV/TSV/Parquet under the
party's schema; arrow_text: their fast path.
"""
