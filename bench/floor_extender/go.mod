module floorextender

go 1.26
