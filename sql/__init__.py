"""DuckDB SQL of the analyses: one table per file, file name = table name."""
