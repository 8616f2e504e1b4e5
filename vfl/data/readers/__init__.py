"""Streaming readers of raw files in bounded memory: Criteo TSV and a party's own file.

criteo_tsv and tokenizer: the raw, headerless Criteo TSV (the local simulation's combined file); table_file: a party's
own CSV/TSV/Parquet under its schema (a Criteo party's file included); arrow_text: its fast path; category_keys: the
key schemes of categorical values.
"""
