module example.com/gofailing

go 1.19
