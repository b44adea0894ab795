"""The lab Git server: real ``git http-backend`` smart HTTP behind per-grant tokens
(the GitLab development adapter; DESIGN.md, External owners are ports)."""
