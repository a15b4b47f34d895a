module hako.bench/go-tools

go 1.27
