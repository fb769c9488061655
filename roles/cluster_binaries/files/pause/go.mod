module tas.local/pause

go 1.24
