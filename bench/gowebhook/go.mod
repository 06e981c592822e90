module admit.dev/bench/gowebhook

go 1.22
