module github.com/lockreg/lockreg/tooltest

go 1.26.0

replace github.com/lockreg/lockreg => ../
