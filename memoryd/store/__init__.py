"""SQLite through APSW: the per-workspace note index. Derived data: delete it and it is rebuilt from the files."""
