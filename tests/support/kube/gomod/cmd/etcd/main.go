// etcd's server at the version the pinned kube-apiserver requires (see ../../go.mod), built from the
// module cache instead of downloaded: the same entry point as etcd's own binary.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
