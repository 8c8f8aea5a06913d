module fusion

go 1.26.8
