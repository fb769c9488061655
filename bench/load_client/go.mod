module loadclient

go 1.26
