module fusion

go 1.26.8

require (
	github.com/ardanlabs/jinja v1.8.0 // indirect
	github.com/dlclark/regexp2/v2 v2.13.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
	golang.org/x/text v0.44.0 // indirect
)
